"""The sim board's parts: datasheet-accurate device models behind the hardware's driver protocols."""
