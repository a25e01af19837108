"""The media tools: `tts` (speech) and `image` (metadata, generation, description).

Files they make land in the workspace and are referred to by workspace path with their size and
type, never as bytes inline: a caller that wants the bytes reads them with `read_bytes`, in
bounded chunks. The camera is a board device: `edgeclaw.tools.hardware.camera`.
"""
