"""MPI plumbing: the rank context built once at the entry point, class groups (torch.distributed
from MPI), launcher checks, stop signals, and the exit/abort policy. Library code takes `comm`;
only the entry points touch `MPI.COMM_WORLD`."""
