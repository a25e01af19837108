"""The skills group: skill directories on disk (`library`) and `skill_search` (`tool`)."""
