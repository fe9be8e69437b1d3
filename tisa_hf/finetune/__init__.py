"""Fine-tuning on GLUE and SQuAD: data, metrics, the Accelerate training loop, sweeps and reports."""
