import sys

from tisa_hf.bench import main

sys.exit(main())
