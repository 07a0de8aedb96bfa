//! What a launch reports about who ran it.

/// Who ran the tasks of one launch. Plain counters: producing it never allocates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LaunchStats {
    /// Tasks the launch was cut into (1 for [`Grain::Caller`](super::Grain::Caller)).
    pub tasks: usize,
    /// Tasks the calling thread ran.
    pub caller_tasks: usize,
    /// Tasks helper threads ran.
    pub helper_tasks: usize,
    /// Helper visits that ran at least one task: normally the number of helper
    /// threads that helped (a helper that arrives as one launch ends and the
    /// next begins can be counted twice).
    pub helpers: usize,
    /// A thread other than the caller ran at least one task.
    pub helped: bool,
}

impl LaunchStats {
    /// Stats of a launch that ran entirely on the calling thread.
    pub(crate) fn inline(tasks: usize) -> Self {
        LaunchStats {
            tasks,
            caller_tasks: tasks,
            ..LaunchStats::default()
        }
    }

    /// Adds the counters of a later launch of the same call (a graph's launches);
    /// `helped` if any of them was helped.
    pub fn merge(&mut self, other: LaunchStats) {
        self.tasks += other.tasks;
        self.caller_tasks += other.caller_tasks;
        self.helper_tasks += other.helper_tasks;
        self.helpers += other.helpers;
        self.helped |= other.helped;
    }
}
