"""Fine-tuning and evaluation on downstream tasks."""
