"""rejoinder."""
