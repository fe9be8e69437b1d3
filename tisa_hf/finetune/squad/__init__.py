"""`tisa-hf squad`: fine-tuning and evaluation on SQuAD v1.1 / v2.0 (`task.py`, read top to bottom)."""
