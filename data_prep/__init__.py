"""Converters from raw datasets into distcgan's class-partitioned HDF5 layout (`distcgan.data`)."""
