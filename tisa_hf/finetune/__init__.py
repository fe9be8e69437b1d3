"""Training runs: the building blocks every training task's `run` calls in the same order (`recipe.py`), its
options (`arguments.py`), the checks before a model loads (`preflight.py`), the Accelerate loop (`trainer.py`),
the run folder (`run_folder.py`) and the upload of a run (`push.py`); and a folder per task, each with the same
files (`options`, `data`, `metrics`, `task`, whose `run` reads top to bottom as the whole run): `glue/`, `squad/`
and `classify/` (long documents). `tisa-hf adapt` (`tisa_hf/adapt/`) is built from the same blocks."""
