"""EarthRL tests."""
