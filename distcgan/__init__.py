"""distcgan: per-class DC-GAN training over MPI ranks, one independent G/D pair per data class."""

__version__ = "0.1.0"
