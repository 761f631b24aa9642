"""Suite-wide fixtures."""
