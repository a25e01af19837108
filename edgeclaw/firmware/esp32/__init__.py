"""The ESP32 bridge firmware (MicroPython); `protocol.py` also runs under CPython (tests, the sim board)."""
