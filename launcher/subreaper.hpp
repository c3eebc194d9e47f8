// distrun as a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process orphaned below it (a
// worker's child whose shim was killed) becomes distrun's child instead of init's, so distrun
// can end it once the workers are gone, and no grandchild outlives the job.
#pragma once

namespace distrun::launcher {

/// Makes this process a child subreaper (a failure is ignored: the shims still reap).
void become_subreaper();

/// SIGKILLs and reaps every child of this process, round after round (a killed orphan's own
/// orphans come next). Call only when none of them is a worker or shim still wanted: after a
/// worker group has ended, every child left is an orphan adopted from below.
void end_adopted_children();

}  // namespace distrun::launcher
