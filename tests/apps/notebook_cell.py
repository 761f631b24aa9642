from herdsched import Agent, Schedule, ThreadedScheduler


def tick(info):
    return f"tick at {info.fired_at:%H:%M:%S}"


sched = ThreadedScheduler(state_dir=".herdsched", max_sleep=0.5)
sched.add_agent(Agent("nb", job=tick, schedules={"tick": Schedule.interval("1s")}))
sched.start()  # run again after an edit, this scheduler takes over from the previous one
sched  # noqa: B018 - the cell shows the status table
