"""EarthRL rewards."""
