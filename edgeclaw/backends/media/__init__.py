"""Media backends: speech synthesis, image metadata, stills from a camera, and playing audio."""
