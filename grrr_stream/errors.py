"""Exception hierarchy.

Every error a user can cause subclasses :class:`GrrrError` *and* the built-in that
fits (ValueError, FileNotFoundError, ...), so callers can catch either. Messages name
the tensor or file involved and say what to do about it; the CLI prints them without
a traceback.
"""


class GrrrError(Exception):
    """Base class for errors caused by inputs, configuration or environment."""


class ConfigError(GrrrError, ValueError):
    """A configuration value or file is invalid."""


class CheckpointNotFoundError(GrrrError, FileNotFoundError):
    """A checkpoint folder, shard or Hub repository could not be found."""


class BenchmarkNotFoundError(GrrrError, FileNotFoundError):
    """A benchmark file is missing, or could not be fetched from the Hub."""


class CheckpointError(GrrrError, ValueError):
    """A checkpoint is malformed, truncated or unsafe to read."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint would need code execution (pickle) or points outside its folder."""


class TensorMismatchError(CheckpointError):
    """The two checkpoints of a transition do not pair up tensor by tensor."""


class NonFiniteWeightError(GrrrError, ValueError):
    """A weight tensor holds NaN or Inf values."""


class StoreError(GrrrError, RuntimeError):
    """The Zarr store is unusable as asked."""


class StoreMismatchError(StoreError):
    """The store holds results of different inputs or settings than requested."""


class WorkdirBusyError(GrrrError, RuntimeError):
    """Another sweep process holds the lock of the workdir."""


class MissingDependencyError(GrrrError, ImportError):
    """An optional dependency is not installed."""


class TrackingUnavailableError(GrrrError, RuntimeError):
    """The tracking target cannot be reached and ``tracking.required`` is set."""


class TrackingStoreError(GrrrError, RuntimeError):
    """The tracking store answers, but cannot take this work as it is (a deleted experiment, a damaged tag): said
    in one line with the remedy; the work goes on and what it would log is kept for ``grrr-stream track``."""


class RenamedSettingWarning(DeprecationWarning):
    """A setting, value or flag spelled by its name before a rename (:func:`renamed`): it still works, under its
    new name. The command line shows each once, as one line (:func:`grrr_stream.cli.entry.main`)."""


def renamed(old: str, new: str) -> None:
    """Warn that ``old`` is deprecated: ``new`` is its name now."""
    import warnings

    warnings.warn(f"{old} is deprecated (renamed in issue 49): write {new}", RenamedSettingWarning, stacklevel=3)
