"""Sensor drivers: the board profile's `[[devices]]` read in engineering units (see `base.py`)."""
