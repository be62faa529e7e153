"""Tasks: what people run end to end (pretraining now; fine-tuning tasks next), built on data + training."""
