"""What operators see: one structured log record per fire, outcome, deferral, delivery, disable,
tick and start-up recovery (the host formats them and derives its metrics from them), and the
store holding the reads behind the API's and the CLI's views (run status, slots, dashboard,
metric figures)."""
