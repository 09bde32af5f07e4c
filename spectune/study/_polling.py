"""How often a study's waits look again, in one place, named by the wait they pace.

Workers share a study through its storage only, so every wait on another trial or worker is a poll.
Reads cost microseconds on a journal and a round trip on a database: a wait that polls often on a
journal polls no faster than it decides on a database.
"""

from __future__ import annotations

__all__ = [
    "DECIDE_AGAIN_S",
    "HOLDER_POLL_S",
    "IDLE_JOURNAL_POLL_S",
    "STALE_CHECK_S",
    "WAIT_FIRST_POLL_S",
    "WAIT_JOURNAL_LONGEST_POLL_S",
    "WAIT_LONGEST_POLL_S",
    "WORKER_RESULT_POLL_S",
]

# An idle worker (nothing to take): it decides again this often though no trial moved (a heartbeat may
# have lapsed), and between decisions looks this often whether one did (on a journal; a database is
# looked at no more often than the worker decides).
DECIDE_AGAIN_S = 0.1
IDLE_JOURNAL_POLL_S = 0.005

# The command waiting on its local workers: how long it waits for a worker's result before it looks at
# the stop request and the workers' exit codes again.
WORKER_RESULT_POLL_S = 0.1

# A trial whose point an earlier live trial holds (TPE proposed it again) waits for that trial's result.
HOLDER_POLL_S = 0.1

# A trial waiting on earlier trials to hold their points polls after 1 ms, then twice as long each time
# up to the longest (the journal's where reads are cheap): an earlier trial holds its point within
# milliseconds, and the trials of a round decide one after another, each detecting the one before at
# its next poll, so a round's deciding costs its trials' decisions plus one poll's lateness each (a
# fixed 50 ms poll: 50 ms a trial).
WAIT_FIRST_POLL_S = 0.001
WAIT_LONGEST_POLL_S = 0.05
WAIT_JOURNAL_LONGEST_POLL_S = 0.002
STALE_CHECK_S = 10.0  # how often such a wait asks a database for trials whose heartbeat lapsed
