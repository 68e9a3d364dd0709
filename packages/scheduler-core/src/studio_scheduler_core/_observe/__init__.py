"""Operator events: one structured log record per fire, outcome, deferral, delivery, disable,
tick and start-up recovery (the host formats them and derives its metrics from them)."""
