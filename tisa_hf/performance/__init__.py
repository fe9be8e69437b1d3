"""Speed and routes: `tisa-hf bench` (speed and memory of TISA against plain attention; `--profile`:
`step_profile.py`), the models and steps they measure (`cases.py`), and `tisa-hf env` (`env.py`: this
machine and the attention route each TISA configuration takes on it)."""
