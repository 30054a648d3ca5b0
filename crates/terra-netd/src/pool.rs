//! A thread pool that grows on demand and keeps idle threads for a while:
//! a connect() hand-off is a few system calls on each side, and starting a
//! thread for each would cost about as much as the work itself. A job never
//! waits for another job: when no thread is idle a new one starts, up to
//! `max` (then the job waits for the first thread to come free).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct State {
    jobs: VecDeque<Job>,
    /// Threads waiting for work (each counts itself while it waits).
    idle: usize,
    /// Idle threads already woken for a queued job.
    woken: usize,
    threads: usize,
}

pub(crate) struct Pool {
    state: Mutex<State>,
    work: Condvar,
    name: &'static str,
    stack: usize,
    max: usize,
    /// How long an idle thread waits for work before it ends.
    linger: Duration,
}

impl Pool {
    pub(crate) fn new(name: &'static str, stack: usize, max: usize) -> Arc<Pool> {
        Arc::new(Pool {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                idle: 0,
                woken: 0,
                threads: 0,
            }),
            work: Condvar::new(),
            name,
            stack,
            max: max.max(1),
            linger: Duration::from_secs(10),
        })
    }

    /// Runs `job` on an idle thread, a new one, or (at `max` threads) the
    /// first one to come free. Err when no thread could be started and none
    /// exists to take the job.
    pub(crate) fn run(self: &Arc<Self>, job: impl FnOnce() + Send + 'static) -> Result<(), ()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.jobs.push_back(Box::new(job));
        if st.idle > st.woken {
            st.woken += 1;
            self.work.notify_one();
            return Ok(());
        }
        if st.threads >= self.max {
            return Ok(()); // queued for the first thread that comes free
        }
        st.threads += 1;
        drop(st);
        let me = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name(self.name.into())
            .stack_size(self.stack)
            .spawn(move || me.work_loop());
        if started.is_err() {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.threads -= 1;
            if st.threads == 0 {
                st.jobs.pop_back();
                return Err(());
            }
        }
        Ok(())
    }

    fn work_loop(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(job) = st.jobs.pop_front() {
                drop(st);
                // A panicking job ends only itself (debug builds; release aborts).
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                st = self.state.lock().unwrap_or_else(|p| p.into_inner());
                continue;
            }
            st.idle += 1;
            let (next, timeout) = self
                .work
                .wait_timeout(st, self.linger)
                .unwrap_or_else(|p| p.into_inner());
            st = next;
            st.idle -= 1;
            st.woken = st.woken.saturating_sub(1);
            if timeout.timed_out() && st.jobs.is_empty() {
                st.threads -= 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    #[test]
    fn jobs_run_and_threads_are_reused() {
        let pool = Pool::new("t", 64 * 1024, 100);
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let (tx, rx) = mpsc::channel();
            let d = Arc::clone(&done);
            pool.run(move || {
                d.fetch_add(1, Ordering::SeqCst);
                tx.send(()).unwrap();
            })
            .unwrap();
            rx.recv().unwrap();
            // Until the thread waits again (it still finishes the job).
            while pool.state.lock().unwrap().idle == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(done.load(Ordering::SeqCst), 100);
        // One job at a time: the idle thread took every later one.
        assert_eq!(pool.state.lock().unwrap().threads, 1);
    }

    #[test]
    fn a_blocked_job_does_not_hold_up_the_next() {
        let pool = Pool::new("t", 64 * 1024, 8);
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        pool.run(move || {
            let _ = release_rx.recv();
        })
        .unwrap();
        pool.run(move || done_tx.send(()).unwrap()).unwrap();
        done_rx.recv().unwrap();
        release_tx.send(()).unwrap();
    }

    #[test]
    fn at_the_cap_jobs_wait_for_a_free_thread() {
        let pool = Pool::new("t", 64 * 1024, 1);
        let (tx, rx) = mpsc::channel();
        for i in 0..10 {
            let tx = tx.clone();
            pool.run(move || tx.send(i).unwrap()).unwrap();
        }
        let got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(pool.state.lock().unwrap().threads <= 1);
    }
}
