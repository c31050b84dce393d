//! Golden rollout simulations, as upstream's `Test_RollingUpdateSequences` does for v1.12: a
//! loop alternates the real rollout arithmetic ([`super::rollout`]) with a fake MachineSet
//! controller, logs every step, and compares the log with `crates/core/tests/data/rollout/*.golden`.
//! At every step the Machines (deleting ones included) stay at or below replicas + maxSurge,
//! and available Machines at or above replicas − maxUnavailable.
//!
//! The fake world: a created Machine is unavailable for one step and available from the next
//! (never, when the scenario's new template is broken); a deleted Machine is gone one step
//! later. The fake MachineSet controller counts deleting Machines as existing before it
//! creates, and deletes unavailable Machines first, then by name, as the real one does.
//! `CAPW_BLESS=1` rewrites the golden files.

use super::rollout::{Plan, SetCounts, Strategy, new_set_replicas, plan};
use capw_api::common::IntOrString;
use std::fmt::Write as _;

#[derive(Debug, Clone)]
struct FakeMachine {
    name: String,
    available: bool,
    deleting: bool,
    /// Created from a template whose Machines never become available.
    broken: bool,
}

#[derive(Debug, Clone)]
struct FakeSet {
    name: String,
    spec: i32,
    machines: Vec<FakeMachine>,
    disable_create: bool,
    /// The template revision it was created for.
    revision: u32,
}

impl FakeSet {
    fn counts(&self) -> SetCounts {
        SetCounts {
            name: self.name.clone(),
            spec: self.spec,
            current: self.machines.len() as i32,
            available: self
                .machines
                .iter()
                .filter(|m| m.available && !m.deleting)
                .count() as i32,
            deleting: self.machines.iter().filter(|m| m.deleting).count() as i32,
        }
    }
}

#[derive(Debug, Clone)]
enum Event {
    /// The template changes (a new revision); `broken` templates never become available.
    NewTemplate {
        broken: bool,
    },
    Scale(i32),
}

struct Scenario {
    name: &'static str,
    replicas: i32,
    /// `None` for OnDelete.
    fenceposts: Option<(IntOrString, IntOrString)>,
    /// Machines of the starting set that are unavailable at the start.
    unavailable_at_start: i32,
    /// (step, event); step 0 happens before the first reconcile.
    events: Vec<(usize, Event)>,
    /// The OnDelete user deletes one old Machine every step from this step on.
    user_deletes_from: Option<usize>,
}

struct World {
    sets: Vec<FakeSet>,
    next_set: u32,
    next_machine: u32,
    revision: u32,
    broken_revisions: Vec<u32>,
    log: String,
}

impl World {
    /// An empty world at template revision 1.
    fn new() -> World {
        World {
            sets: vec![],
            next_set: 0,
            next_machine: 0,
            revision: 1,
            broken_revisions: vec![],
            log: String::new(),
        }
    }

    fn new_machine(&mut self, revision: u32) -> FakeMachine {
        self.next_machine += 1;
        FakeMachine {
            name: format!("m{}", self.next_machine),
            available: false,
            deleting: false,
            broken: self.broken_revisions.contains(&revision),
        }
    }

    /// Time passes: deleted Machines go, created ones become available.
    fn tick(&mut self) {
        for s in &mut self.sets {
            s.machines.retain(|m| !m.deleting);
            for m in &mut s.machines {
                if !m.broken {
                    m.available = true;
                }
            }
        }
    }

    /// The fake MachineSet controller.
    fn machine_sets(&mut self) {
        for i in 0..self.sets.len() {
            let (spec, have, disabled, revision) = {
                let s = &self.sets[i];
                (
                    s.spec,
                    s.machines.len() as i32,
                    s.disable_create,
                    s.revision,
                )
            };
            if spec > have && !disabled {
                for _ in 0..spec - have {
                    let m = self.new_machine(revision);
                    self.sets[i].machines.push(m);
                }
            }
            let s = &mut self.sets[i];
            let live = s.machines.iter().filter(|m| !m.deleting).count() as i32;
            if live > spec {
                let mut order: Vec<usize> = (0..s.machines.len())
                    .filter(|&j| !s.machines[j].deleting)
                    .collect();
                order.sort_by_key(|&j| (s.machines[j].available, s.machines[j].name.clone()));
                for &j in order.iter().take((live - spec) as usize) {
                    s.machines[j].deleting = true;
                }
            }
        }
    }

    /// The real MachineDeployment arithmetic; returns what it decided, for the log.
    fn machine_deployment(&mut self, strategy: Strategy, replicas: i32) -> Plan {
        if !self.sets.iter().any(|s| s.revision == self.revision) {
            let all: Vec<SetCounts> = self.sets.iter().map(FakeSet::counts).collect();
            let initial = new_set_replicas(strategy, replicas, &all, 0);
            self.next_set += 1;
            self.sets.push(FakeSet {
                name: format!("ms{}", self.next_set),
                spec: initial,
                machines: vec![],
                disable_create: false,
                revision: self.revision,
            });
            let _ = writeln!(
                self.log,
                "  md: created ms{} (revision {}) with {initial} replicas",
                self.next_set, self.revision
            );
        }
        let new = self
            .sets
            .iter()
            .find(|s| s.revision == self.revision)
            .map(FakeSet::counts)
            .unwrap_or_else(|| unreachable!("created above"));
        let old: Vec<SetCounts> = self
            .sets
            .iter()
            .filter(|s| s.revision != self.revision)
            .map(FakeSet::counts)
            .collect();
        let p = plan(strategy, replicas, &new, &old);
        for (name, to) in &p.scale {
            if let Some(s) = self.sets.iter_mut().find(|s| &s.name == name) {
                let _ = writeln!(self.log, "  md: scaled {name} from {} to {to}", s.spec);
                s.spec = *to;
            }
        }
        for name in &p.disable_create {
            if let Some(s) = self
                .sets
                .iter_mut()
                .find(|s| &s.name == name && !s.disable_create)
            {
                s.disable_create = true;
                let _ = writeln!(self.log, "  md: {name} may no longer create Machines");
            }
        }
        for name in &p.delete {
            self.sets.retain(|s| &s.name != name);
            let _ = writeln!(self.log, "  md: deleted {name}");
        }
        p
    }

    fn machines(&self) -> i32 {
        self.sets.iter().map(|s| s.machines.len() as i32).sum()
    }

    fn available(&self) -> i32 {
        self.sets.iter().map(|s| s.counts().available).sum()
    }

    fn describe(&self) -> String {
        let sets: Vec<String> = self
            .sets
            .iter()
            .map(|s| {
                let c = s.counts();
                format!("{} {}/{}/{}", s.name, c.spec, c.current, c.available)
            })
            .collect();
        format!(
            "{} | machines {} available {}",
            sets.join(" "),
            self.machines(),
            self.available()
        )
    }
}

fn strategy_of(s: &Scenario, replicas: i32) -> Strategy {
    match &s.fenceposts {
        Some((surge, unavailable)) => {
            let (surge, unavailable) =
                super::rollout::resolve_fenceposts(surge, unavailable, replicas)
                    .unwrap_or_else(|e| panic!("{}: {e}", s.name));
            Strategy::RollingUpdate { surge, unavailable }
        }
        None => Strategy::OnDelete,
    }
}

/// Runs a scenario to convergence (or the step cap) and returns its log; panics when an
/// invariant breaks.
fn run(s: &Scenario) -> String {
    let mut replicas = s.replicas;
    // Around a scale both sizes bound the Machines: (smallest, largest) replicas so far.
    let mut bounds = (replicas, replicas);
    let mut world = World::new();
    // The starting state: one set of `replicas` Machines, some unavailable.
    world.next_set = 1;
    let mut start = FakeSet {
        name: "ms1".into(),
        spec: replicas,
        machines: vec![],
        disable_create: false,
        revision: 1,
    };
    for i in 0..replicas {
        let mut m = world.new_machine(1);
        m.available = i >= s.unavailable_at_start;
        // Unavailable starting Machines stay so: the rollout must replace them.
        m.broken = !m.available;
        start.machines.push(m);
    }
    world.sets.push(start);
    let _ = writeln!(
        world.log,
        "scenario {}: replicas {replicas}, strategy {}, {} unavailable at start",
        s.name,
        match &s.fenceposts {
            Some((a, b)) => format!("RollingUpdate maxSurge {a} maxUnavailable {b}"),
            None => "OnDelete".into(),
        },
        s.unavailable_at_start
    );
    let floor_at_start = world.available();
    let _ = writeln!(world.log, "[0] {}", world.describe());
    let cap = 150;
    for step in 1..=cap {
        for (_, ev) in s.events.iter().filter(|(at, _)| *at == step) {
            match ev {
                Event::NewTemplate { broken } => {
                    world.revision += 1;
                    if *broken {
                        let r = world.revision;
                        world.broken_revisions.push(r);
                    }
                    let _ = writeln!(
                        world.log,
                        "  user: template changed to revision {}{}",
                        world.revision,
                        if *broken { " (broken)" } else { "" }
                    );
                }
                Event::Scale(to) => {
                    let _ = writeln!(world.log, "  user: scaled from {replicas} to {to}");
                    replicas = *to;
                    bounds = (bounds.0.min(*to), bounds.1.max(*to));
                }
            }
        }
        if s.user_deletes_from.is_some_and(|from| step >= from) {
            let current = world.revision;
            if let Some(m) = world
                .sets
                .iter_mut()
                .filter(|set| set.revision != current)
                .flat_map(|set| set.machines.iter_mut())
                .find(|m| !m.deleting)
            {
                m.deleting = true;
                let _ = writeln!(world.log, "  user: deleted Machine {}", m.name);
            }
        }
        let strategy = strategy_of(s, replicas);
        world.tick();
        world.machine_sets();
        check(
            s,
            &world,
            strategy,
            bounds,
            floor_at_start,
            step,
            "after the MachineSets",
        );
        world.machine_deployment(strategy, replicas);
        world.machine_sets();
        check(
            s,
            &world,
            strategy,
            bounds,
            floor_at_start,
            step,
            "after the MachineDeployment",
        );
        let _ = writeln!(world.log, "[{step}] {}", world.describe());
        let converged = world.sets.len() == 1
            && world.sets[0].revision == world.revision
            && world.machines() == replicas
            && world.available() == replicas
            && s.events.iter().all(|(at, _)| *at <= step);
        let stuck = world.broken_revisions.contains(&world.revision)
            && s.events.iter().all(|(at, _)| *at + 10 <= step);
        if converged || stuck {
            let _ = writeln!(
                world.log,
                "{} after {step} steps",
                if converged {
                    "converged"
                } else {
                    "stuck on the broken template, as it should be"
                }
            );
            return world.log;
        }
    }
    panic!("{}: no convergence in {cap} steps:\n{}", s.name, world.log);
}

fn check(
    s: &Scenario,
    world: &World,
    strategy: Strategy,
    (smallest, largest): (i32, i32),
    floor_at_start: i32,
    step: usize,
    when: &str,
) {
    let ceiling = largest + strategy.max_surge();
    let floor = (smallest - strategy.max_unavailable(smallest)).min(floor_at_start);
    assert!(
        world.machines() <= ceiling,
        "{}: step {step} {when}: {} Machines exceed replicas + maxSurge = {ceiling}\n{}",
        s.name,
        world.machines(),
        world.log
    );
    // OnDelete's user takes Machines away itself; RollingUpdate must keep the floor.
    if matches!(strategy, Strategy::RollingUpdate { .. }) {
        assert!(
            world.available() >= floor,
            "{}: step {step} {when}: {} available Machines, below replicas - maxUnavailable = {floor}\n{}",
            s.name,
            world.available(),
            world.log
        );
    }
}

fn scenarios() -> Vec<Scenario> {
    let n = IntOrString::Int;
    let p = |s: &str| IntOrString::String(s.into());
    let change = || vec![(1, Event::NewTemplate { broken: false })];
    let rolling = |name, replicas, surge, unavailable| Scenario {
        name,
        replicas,
        fenceposts: Some((surge, unavailable)),
        unavailable_at_start: 0,
        events: change(),
        user_deletes_from: None,
    };
    let on_delete = |name, replicas| Scenario {
        name,
        replicas,
        fenceposts: None,
        unavailable_at_start: 0,
        events: change(),
        user_deletes_from: Some(2),
    };
    vec![
        rolling("3r-s1-u0", 3, n(1), n(0)),
        rolling("3r-s0-u1", 3, n(0), n(1)),
        rolling("6r-s10-u0", 6, n(10), n(0)),
        rolling("6r-s0-u10", 6, n(0), n(10)),
        rolling("6r-s1-u3", 6, n(1), n(3)),
        rolling("6r-s3-u1", 6, n(3), n(1)),
        rolling("4r-s25pct-u25pct", 4, p("25%"), p("25%")),
        rolling("10r-s39pct-u39pct", 10, p("39%"), p("39%")),
        rolling("5r-s0pct-u0pct", 5, p("0%"), p("0%")),
        Scenario {
            unavailable_at_start: 1,
            ..rolling("3r-s1-u0-one-unavailable", 3, n(1), n(0))
        },
        Scenario {
            unavailable_at_start: 2,
            ..rolling("6r-s0-u1-two-unavailable", 6, n(0), n(1))
        },
        Scenario {
            events: vec![
                (1, Event::NewTemplate { broken: false }),
                (3, Event::NewTemplate { broken: false }),
            ],
            ..rolling("6r-s3-u1-change-spec-mid-rollout", 6, n(3), n(1))
        },
        Scenario {
            events: vec![
                (1, Event::NewTemplate { broken: false }),
                (3, Event::Scale(12)),
            ],
            ..rolling("6r-s3-u1-scale-up-to-12", 6, n(3), n(1))
        },
        Scenario {
            events: vec![
                (1, Event::NewTemplate { broken: false }),
                (3, Event::Scale(6)),
            ],
            ..rolling("12r-s3-u1-scale-down-to-6", 12, n(3), n(1))
        },
        Scenario {
            events: vec![(1, Event::NewTemplate { broken: true })],
            ..rolling("3r-s1-u0-broken-template", 3, n(1), n(0))
        },
        Scenario {
            events: vec![(1, Event::NewTemplate { broken: true })],
            ..rolling("6r-s1-u2-broken-template", 6, n(1), n(2))
        },
        on_delete("3r-on-delete", 3),
        on_delete("6r-on-delete", 6),
        on_delete("12r-on-delete", 12),
    ]
}

#[test]
fn rolling_update_sequences_match_their_golden_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/rollout");
    let bless = std::env::var_os("CAPW_BLESS").is_some();
    let mut wrong = vec![];
    for s in scenarios() {
        let log = run(&s);
        let file = dir.join(format!("{}.golden", s.name));
        if bless {
            std::fs::create_dir_all(&dir).expect("golden dir");
            std::fs::write(&file, &log).expect("write golden");
            continue;
        }
        let want = std::fs::read_to_string(&file).unwrap_or_default();
        if want != log {
            wrong.push(format!(
                "{} differs from {} (CAPW_BLESS=1 rewrites it after review):\n{log}",
                s.name,
                file.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The invariants catch a planner that breaks them: a surge the arithmetic was not told of.
#[test]
#[should_panic(expected = "exceed replicas + maxSurge")]
fn the_simulation_fails_a_planner_that_overshoots() {
    let s = Scenario {
        name: "overshoot",
        replicas: 3,
        fenceposts: Some((IntOrString::Int(3), IntOrString::Int(0))),
        unavailable_at_start: 0,
        events: vec![(1, Event::NewTemplate { broken: false })],
        user_deletes_from: None,
    };
    let mut world = World::new();
    world.sets.push(FakeSet {
        name: "ms1".into(),
        spec: 3,
        machines: (0..3)
            .map(|i| FakeMachine {
                name: format!("m{i}"),
                available: true,
                deleting: false,
                broken: false,
            })
            .collect(),
        disable_create: false,
        revision: 1,
    });
    world.revision = 2;
    // The planner surges by 3; the check holds it to a surge of 1.
    world.machine_deployment(strategy_of(&s, 3), 3);
    world.machine_sets();
    let strict = Strategy::RollingUpdate {
        surge: 1,
        unavailable: 0,
    };
    check(
        &s,
        &world,
        strict,
        (3, 3),
        3,
        1,
        "after the MachineDeployment",
    );
}
