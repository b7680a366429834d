"""Load generators and scenarios against a running aucstream service (loopback only)."""
