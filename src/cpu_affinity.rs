//! Where a volume's worker threads run (`cpu_affinity`): the CPUs the daemon may use, and
//! pinning the calling thread to one of them. On a host whose wake-ups across CPUs are
//! dear, a worker on the CPU of the guest's vCPU and of the disk's interrupt wakes no
//! other CPU for a request (design §8.13).

use std::io;

/// CPU numbers at or above this do not fit a `cpu_set_t`.
pub const CPU_LIMIT: usize = libc::CPU_SETSIZE as usize;

/// The CPUs the calling thread may run on (its affinity, which threads inherit), in
/// increasing order.
pub fn allowed() -> io::Result<Vec<u16>> {
    // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into `set`.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads the set we own, at indexes below CPU_SETSIZE.
    Ok((0..CPU_LIMIT)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .map(|cpu| cpu as u16)
        .collect())
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: u16) -> io::Result<()> {
    if usize::from(cpu) >= CPU_LIMIT {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: as in `allowed`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes the set we own, at an index below CPU_SETSIZE.
    unsafe { libc::CPU_SET(usize::from(cpu), &mut set) };
    // SAFETY: the kernel reads size_of::<cpu_set_t>() bytes of `set`.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `cpus` (increasing) as taskset writes them: `0-3,6`.
pub fn list(cpus: &[u16]) -> String {
    let mut ranges: Vec<(u16, u16)> = Vec::new();
    for &cpu in cpus {
        match ranges.last_mut() {
            Some((_, end)) if cpu == *end + 1 => *end = cpu,
            _ => ranges.push((cpu, cpu)),
        }
    }
    ranges
        .iter()
        .map(|&(start, end)| {
            if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Why `cpus` is not a list of CPUs for `workers` worker threads, if it is not: worker `t`
/// runs on `cpus[t % cpus.len()]`, so a list longer than `workers` names CPUs no worker
/// would use. Whether this machine has the CPUs is [`available`]'s question.
pub fn check(cpus: &[u16], workers: u16) -> Result<(), String> {
    if cpus.is_empty() {
        return Err("names no CPU (leave it out to let the scheduler place the workers)".into());
    }
    if cpus.len() > usize::from(workers) {
        return Err(format!(
            "names {} CPUs for {workers} worker(s): worker t runs on the t-th CPU, so at most {workers}",
            cpus.len()
        ));
    }
    match cpus.iter().find(|&&cpu| usize::from(cpu) >= CPU_LIMIT) {
        Some(cpu) => Err(format!("CPU {cpu}: CPU numbers go up to {}", CPU_LIMIT - 1)),
        None => Ok(()),
    }
}

/// Whether a thread of the daemon can be pinned to each of `cpus` now: a short-lived
/// thread tries them in turn, so the answer is the kernel's (the daemon's cpuset, CPUs
/// online), not a guess from this thread's own affinity, which `isolcpus` or systemd's
/// `CPUAffinity=` may have narrowed.
pub fn available(cpus: &[u16]) -> Result<(), String> {
    let cpus = cpus.to_vec();
    let tried = std::thread::Builder::new()
        .name("cpu-check".into())
        .spawn(move || {
            crate::seccomp::confine(crate::seccomp::ThreadClass::Helper);
            cpus.into_iter()
                .find_map(|cpu| pin_current_thread(cpu).err().map(|e| (cpu, e)))
        })
        .map_err(|e| format!("cannot start a thread to try the CPUs: {e}"))?
        .join()
        .map_err(|_| "the thread trying the CPUs panicked".to_string())?;
    match tried {
        Some((cpu, e)) => Err(format!(
            "CPU {cpu} is not one the daemon may run on ({e}; the daemon's CPUs: {})",
            allowed().map_or_else(|e| e.to_string(), |cpus| list(&cpus))
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_like_taskset() {
        assert_eq!(list(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(list(&[1]), "1");
        assert_eq!(list(&[0, 2, 4, 5]), "0,2,4-5");
        assert_eq!(list(&[]), "");
    }

    #[test]
    fn checks_name_what_is_wrong() {
        let allowed = allowed().unwrap();
        let first = allowed[0];
        assert_eq!(check(&[first], 1), Ok(()));
        assert_eq!(check(&[first], 4), Ok(()), "one CPU for every worker");
        assert!(check(&[], 1).unwrap_err().contains("names no CPU"));
        assert!(check(&[first, first], 1)
            .unwrap_err()
            .contains("names 2 CPUs for 1 worker(s)"));
        assert!(check(&[CPU_LIMIT as u16], 1)
            .unwrap_err()
            .contains("CPU numbers go up to 1023"));
        assert_eq!(available(&allowed), Ok(()));
        // A CPU this machine does not have (`allowed` would not show an isolated one).
        let outside = CPU_LIMIT as u16 - 1;
        assert!(!allowed.contains(&outside), "a machine with 1,024 CPUs");
        let e = available(&[first, outside]).unwrap_err();
        assert!(
            e.contains(&format!("CPU {outside} is not one the daemon may run on (")),
            "{e}"
        );
    }

    #[test]
    fn a_pinned_thread_runs_only_there() {
        let cpu = *allowed().unwrap().last().unwrap();
        let on = std::thread::spawn(move || {
            pin_current_thread(cpu).unwrap();
            allowed().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(on, vec![cpu]);
        assert!(pin_current_thread(CPU_LIMIT as u16).is_err());
    }
}
