"""The automation group: `cron` and `schedule` (`cron`), `gateway` (`gateway`); `when` the schedules,
`targets` the job targets, `daily_note` the `memory` target."""
