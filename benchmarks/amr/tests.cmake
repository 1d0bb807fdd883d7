# tests: filled below
