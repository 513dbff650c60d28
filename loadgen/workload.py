"""Deprecated path of the workload interface: use :mod:`loadgen.workloads`.

Kept so plugins written against ``from loadgen.workload import Workload`` keep working.
"""

import warnings

from loadgen.workloads import *  # noqa: F401,F403
from loadgen.workloads import __all__  # noqa: F401

warnings.warn("loadgen.workload is deprecated; import from loadgen.workloads", DeprecationWarning, stacklevel=2)
