"""Adapting pretrained encoders to TISA (`tisa-hf adapt`) and measuring them on long inputs (`tisa-hf lm-eval`)."""
