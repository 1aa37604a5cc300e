"""EarthRL conf."""
