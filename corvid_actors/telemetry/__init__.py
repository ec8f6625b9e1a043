"""Telemetry: OpenTelemetry traces (``tracing``) and Prometheus metrics (``metrics``)."""
