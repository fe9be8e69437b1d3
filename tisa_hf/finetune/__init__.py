"""Training runs: fine-tuning on GLUE, SQuAD and long documents (`classify_task.py`) and the shared recipe (`recipe.py`)
that adaptation uses too; the run folder (`run_folder.py`), checks before a run (`preflight.py`), the Accelerate loop
(`trainer.py`), sweeps, reports and the upload of a run (`push.py`)."""
