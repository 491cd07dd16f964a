"""The external metrics API server: `spd_agg_metrics` for the HPA, behind an APIService."""
