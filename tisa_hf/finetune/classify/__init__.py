"""`tisa-hf classify`: fine-tuning and evaluation on long-document classification (`task.py`): documents from
Hyperpartisan's XML or CSV/JSON files (`data.py`, `files.py`, `hyperpartisan.py`), their labels, fixed splits or
cross-validation folds (`folds.py`), and what a model reads of a long document (`truncation.py`)."""
