import sys

from tisa_hf.performance.bench import main

sys.exit(main())
