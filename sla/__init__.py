"""SLA measurement, reports and service credits (built in the SLA issue)."""
