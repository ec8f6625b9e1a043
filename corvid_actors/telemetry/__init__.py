"""Telemetry from the ecosystem: Prometheus metrics (``metrics``) and OpenTelemetry traces."""
