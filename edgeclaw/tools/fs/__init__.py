"""The fs group: read_file, write_file, edit_file, file_append, list_files, search, glob and read_bytes.

- `workspace`: path scoping (NUL, `..`, encoded traversal, symlink escape) and the one safe read;
- `files`: the file tools; a `PathRouter` (the virtual file system) may claim paths first;
- `file_io`: their reads and atomic writes; `walk`: bounded directory walks; `globs`: globs as
  patterns and matching under a deadline, through `pattern_match` (and `pattern_worker`);
- `read_bytes`: chunks of a file for programs.
"""
