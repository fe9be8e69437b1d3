"""Training runs: the shared recipe every training task runs (`recipe.py`: `run_task` runs a `Task`), its options
(`arguments.py`), the checks before a model loads (`preflight.py`), the Accelerate loop (`trainer.py`), the run
folder (`run_folder.py`) and the upload of a run (`push.py`); and a folder per task, each with the same files
(`options`, `data`, `metrics`, `task`): `glue/`, `squad/` and `classify/` (long documents). `tisa-hf adapt`
(`tisa_hf/adapt/`) runs the same recipe."""
