//! Children that do not outlive the process that started them.

use std::process::Command;

/// Makes the child started by `cmd` die with this process: killing a
/// `tphdb bench` left its engine's child running, writing to the disk of
/// the next run and halving its throughput. Linux delivers the signal
/// when the *thread* that spawned the child exits: spawn from a thread
/// that waits for it.
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs between fork and exec and calls only
        // async-signal-safe functions (prctl, getppid).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the prctl.
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("the parent exited"));
                }
                Ok(())
            });
        }
    }
    cmd
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn the_child_is_killed_when_its_spawner_exits() {
        // The spawning thread stands in for the parent: it exits at once.
        let child = std::thread::spawn(|| {
            die_with_parent(Command::new("sleep").arg("30"))
                .spawn()
                .unwrap()
        })
        .join()
        .unwrap();
        let mut child = child;
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    }
}
