"""Firmware edgeclaw ships for the microcontrollers it talks to (see docs/hardware.md)."""
