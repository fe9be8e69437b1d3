"""`tisa-hf glue`: fine-tuning and evaluation on a GLUE task (`task.py`, read top to bottom)."""
