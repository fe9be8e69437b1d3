"""What works over finished runs of the training tasks: `tisa-hf sweep` (a grid of runs, resumably), `tisa-hf
report` (the results tables and paired differences; `document_report.py` for long-document runs) and the variant
each run belongs to (`variants.py`)."""
