"""Migration telemetry: the usage recorder and store, Prometheus metrics, the report and the dashboard."""
