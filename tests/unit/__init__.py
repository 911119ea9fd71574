"""Unit tests of the pure core: no I/O, no servers (marker ``unit``)."""
