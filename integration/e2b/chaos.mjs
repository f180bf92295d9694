// Concurrent episodes through the official e2b JS SDK against gvx serve,
// mixing what RL harnesses do to sandboxes at once: creates from a plain,
// a pooled and a checkpointable pooled template, commands (some cut by
// their timeout, some in the background and killed), files, pause and
// resume, checkpoints with rollbacks and forks (gvx's routes), sandboxes
// killed with commands running, and sandboxes left to expire. Every
// operation checks what it got; an error that is not the one the
// operation expects is a finding. Env: E2B_* as sdk.mjs; CHAOS_WORKERS
// (default 6), CHAOS_SECONDS (default 40), CHAOS_SEED; CHAOS_TEMPLATES,
// the templates to create from, and CHAOS_CHECKPOINTABLE, those of them
// whose sandboxes can be checkpointed; CHAOS_MODE=shared for shared()
// below.
//
// Prints one line per finding ("FINDING op: …") and at the end a JSON
// summary line ("chaos {…}") with the count of each operation done.
const { Sandbox, TimeoutError, CommandExitError, NotFoundError } = await import(process.env.E2B_MODULE || 'e2b')

const workers = Number(process.env.CHAOS_WORKERS || 6)
const seconds = Number(process.env.CHAOS_SECONDS || 40)
let seed = Number(process.env.CHAOS_SEED || Date.now() % 100000)
const api = process.env.E2B_API_URL
const key = process.env.E2B_API_KEY
const templates = (process.env.CHAOS_TEMPLATES || 'base,pooled,ckpooled').split(',')
const checkpointable = new Set((process.env.CHAOS_CHECKPOINTABLE || 'base,ckpooled').split(','))

// rand is a seeded generator (mulberry32), so that a run can be repeated.
function rand() {
  seed |= 0
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
const pick = (a) => a[Math.floor(rand() * a.length)]
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

const counts = {}
const allHandles = []
const findings = []
function count(op) {
  counts[op] = (counts[op] || 0) + 1
}
function finding(op, sbx, e) {
  const line = `FINDING ${op} ${sbx?.sandboxId || ''}: ${e?.stack || e}`
  findings.push(line)
  console.log(line)
}

// gvx calls one of gvx's own routes.
async function gvx(method, path, body) {
  const r = await fetch(api + path, {
    method,
    headers: { 'X-API-KEY': key, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await r.text()
  let data = null
  try {
    data = text ? JSON.parse(text) : null
  } catch {
    data = text
  }
  return { status: r.status, data }
}

function expect(cond, what) {
  if (!cond) throw new Error(what)
}

// The operations on a live sandbox. Each throws on a finding.
const ops = {
  async run(ep) {
    const v = Math.floor(rand() * 1e9)
    const r = await ep.sbx.commands.run(`echo ${v} > /tmp/v && cat /tmp/v`)
    expect(r.stdout.trim() === String(v), `stdout ${JSON.stringify(r.stdout)}, want ${v}`)
    ep.v = String(v)
  },
  async exitCode(ep) {
    try {
      await ep.sbx.commands.run('exit 3')
      throw new Error('exit 3 did not throw')
    } catch (e) {
      expect(e instanceof CommandExitError && e.exitCode === 3, `exit 3 gave ${e}`)
    }
  },
  async files(ep) {
    const data = `f${Math.floor(rand() * 1e9)}\n`.repeat(1 + Math.floor(rand() * 2000))
    await ep.sbx.files.write('/tmp/f.txt', data)
    const got = await ep.sbx.files.read('/tmp/f.txt')
    expect(got === data, `read ${got.length} bytes, wrote ${data.length}`)
  },
  async timeout(ep) {
    // A command cut by its timeout must not run on in the sandbox.
    const mark = 700 + Math.floor(rand() * 99)
    const t0 = performance.now()
    try {
      await ep.sbx.commands.run(`sleep ${mark}`, { timeoutMs: 300 + Math.floor(rand() * 500) })
      throw new Error('sleep outlived no timeout')
    } catch (e) {
      expect(e instanceof TimeoutError || /timeout|deadline/i.test(String(e)), `timeout gave ${e}`)
    }
    expect(performance.now() - t0 < 20000, `the timeout took ${performance.now() - t0} ms`)
    for (let i = 0; ; i++) {
      const r = await ep.sbx.commands.run(`for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep ${mark} $' || true`)
      if (r.stdout.trim() === '0') break
      if (i >= 50) throw new Error(`sleep ${mark} still runs after its command's timeout`)
      await sleep(100)
    }
  },
  async background(ep) {
    const h = await ep.sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
    await sleep(rand() * 200)
    expect((await ep.sbx.commands.kill(h.pid)) === true, 'kill of a running background command said false')
    try {
      await h.wait()
      throw new Error('a killed command waited to a clean exit')
    } catch (e) {
      expect(e instanceof CommandExitError, `wait of a killed command gave ${e}`)
    }
  },
  async parallel(ep) {
    const rs = await Promise.all([1, 2, 3].map((i) => ep.sbx.commands.run(`echo p${i}`)))
    rs.forEach((r, i) => expect(r.stdout === `p${i + 1}\n`, `parallel run ${i}: ${JSON.stringify(r.stdout)}`))
  },
  async pause(ep) {
    if (!checkpointable.has(ep.template)) return false
    expect((await ep.sbx.pause()) === true, 'pause said false')
    ep.sbx = await Sandbox.connect(ep.sbx.sandboxId)
    if (ep.v) {
      const r = await ep.sbx.commands.run('cat /tmp/v')
      expect(r.stdout.trim() === ep.v, `after resume /tmp/v is ${JSON.stringify(r.stdout)}, want ${ep.v}`)
    }
  },
  async rollback(ep) {
    if (!checkpointable.has(ep.template)) {
      // 409; or 201 when the pool was empty and the create booted a
      // sandbox of its own.
      const r = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/checkpoints`, {})
      expect(r.status === 409 || r.status === 201, `checkpoint of ${ep.template}: ${r.status} ${JSON.stringify(r.data)}, want 409`)
      if (r.status === 201) ep.handles.push(r.data.handle)
      return
    }
    const v = `c${Math.floor(rand() * 1e9)}`
    await ep.sbx.commands.run(`echo ${v} > /tmp/c`)
    // A command runs across the checkpoint half of the time.
    const busy = rand() < 0.5 ? ep.sbx.commands.run('sleep 0.2; echo busy') : null
    busy?.catch(() => {}) // awaited below; not unhandled meanwhile
    const ck = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/checkpoints`, { async: rand() < 0.5 })
    expect(ck.status === 201, `checkpoint: ${ck.status} ${JSON.stringify(ck.data)}`)
    if (busy) expect((await busy).stdout === 'busy\n', 'a command across the checkpoint')
    await ep.sbx.commands.run('echo later > /tmp/c; touch /tmp/later')
    const rb = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/rollback`, { handle: ck.data.handle })
    expect(rb.status === 200, `rollback: ${rb.status} ${JSON.stringify(rb.data)}`)
    const r = await ep.sbx.commands.run('cat /tmp/c; test -e /tmp/later && echo later-exists || true')
    expect(r.stdout === `${v}\n`, `after rollback: ${JSON.stringify(r.stdout)}, want ${v}`)
    ep.handles.push(ck.data.handle)
    allHandles.push({ handle: ck.data.handle, sandbox: ep.sbx.sandboxId })
    if (rand() < 0.5) {
      const d = await gvx('DELETE', `/gvx/v1/checkpoints/${ep.handles.shift()}`)
      expect(d.status === 204, `release: ${d.status} ${JSON.stringify(d.data)}`)
    }
  },
  async fork(ep) {
    if (!checkpointable.has(ep.template)) return false
    const v = `k${Math.floor(rand() * 1e9)}`
    await ep.sbx.commands.run(`echo ${v} > /tmp/k`)
    const f = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/fork`, { count: 1 + Math.floor(rand() * 2) })
    expect(f.status === 201 && Array.isArray(f.data), `fork: ${f.status} ${JSON.stringify(f.data)}`)
    await Promise.all(
      f.data.map(async (s) => {
        const child = await Sandbox.connect(s.sandboxID)
        try {
          const r = await child.commands.run('cat /tmp/k')
          expect(r.stdout === `${v}\n`, `fork ${s.sandboxID}: ${JSON.stringify(r.stdout)}, want ${v}`)
        } finally {
          expect((await child.kill()) === true, `kill of fork ${s.sandboxID} said false`)
        }
      }),
    )
  },
  async pausedCheckpoint(ep) {
    if (!checkpointable.has(ep.template)) return false
    expect((await ep.sbx.pause()) === true, 'pause said false')
    const r = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/checkpoints`, {})
    expect(r.status === 409, `checkpoint of a paused sandbox: ${r.status} ${JSON.stringify(r.data)}, want 409`)
    ep.sbx = await Sandbox.connect(ep.sbx.sandboxId)
    await ops.run(ep)
  },
  async foreignHandle(ep) {
    const h = pick(allHandles.filter((x) => x.sandbox !== ep.sbx.sandboxId).concat([{ handle: 'ck-0000000000000000' }]))
    const r = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/rollback`, { handle: h.handle })
    expect(r.status === 400 || r.status === 404 || (r.status === 409 && !checkpointable.has(ep.template)), `rollback to ${h.handle} of ${h.sandbox}: ${r.status} ${JSON.stringify(r.data)}`)
    await ops.run(ep)
  },
  async root(ep) {
    const r = await ep.sbx.commands.run('id -u; echo x > /root/r; cat /root/r', { user: 'root' })
    expect(r.stdout === '0\nx\n', `as root: ${JSON.stringify(r.stdout)}`)
    const data = `r${Math.floor(rand() * 1e9)}`
    await ep.sbx.files.write('/root/f', data, { user: 'root' })
    expect((await ep.sbx.files.read('/root/f', { user: 'root' })) === data, 'a root file read back')
  },
  async envCwd(ep) {
    const r = await ep.sbx.commands.run('echo $FOO; pwd', { envs: { FOO: 'bar baz' }, cwd: '/tmp' })
    expect(r.stdout === 'bar baz\n/tmp\n', `envs and cwd: ${JSON.stringify(r.stdout)}`)
  },
  async stdin(ep) {
    const h = await ep.sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 })
    await ep.sbx.commands.sendStdin(h.pid, 'ping\n')
    for (let i = 0; i < 250 && h.stdout === ''; i++) await sleep(20)
    expect(h.stdout === 'ping\n', `cat's echo: ${JSON.stringify(h.stdout)}`)
    expect((await ep.sbx.commands.kill(h.pid)) === true, 'kill of cat said false')
    await h.wait().catch(() => {})
  },
  async bigOutput(ep) {
    const n = 1 + Math.floor(rand() * 4_000_000)
    const r = await ep.sbx.commands.run(`head -c ${n} /dev/zero | tr '\\0' a`)
    expect(r.stdout.length === n, `stdout of ${n} bytes: ${r.stdout.length}`)
  },
  async tree(ep) {
    // Two checkpoints, then back to each in turn (the second is not an
    // ancestor of the state after the first rollback).
    if (!checkpointable.has(ep.template)) return false
    const ck = async () => {
      const r = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/checkpoints`, {})
      expect(r.status === 201, `checkpoint: ${r.status} ${JSON.stringify(r.data)}`)
      ep.handles.push(r.data.handle)
      allHandles.push({ handle: r.data.handle, sandbox: ep.sbx.sandboxId })
      return r.data.handle
    }
    const back = async (h, want) => {
      const r = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/rollback`, { handle: h })
      expect(r.status === 200, `rollback to ${h}: ${r.status} ${JSON.stringify(r.data)}`)
      const got = (await ep.sbx.commands.run('cat /tmp/t || true')).stdout
      expect(got === want, `after the rollback to ${h}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`)
    }
    await ep.sbx.commands.run('echo A > /tmp/t')
    const a = await ck()
    await ep.sbx.commands.run('echo B > /tmp/t')
    const b = await ck()
    await ep.sbx.commands.run('echo C > /tmp/t')
    await back(a, 'A\n')
    await back(b, 'B\n')
    await back(a, 'A\n')
  },
  async reset(ep) {
    await ep.sbx.commands.run('echo dirty > /tmp/dirty')
    const r = await gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/reset`, {})
    expect(r.status === 200, `reset: ${r.status} ${JSON.stringify(r.data)}`)
    const got = await ep.sbx.commands.run('test -e /tmp/dirty && echo dirty || echo clean')
    expect(got.stdout === 'clean\n', `after reset: ${JSON.stringify(got.stdout)}`)
    ep.v = undefined
  },
  async port(ep) {
    if (!ep.template.startsWith('py')) return false
    const port = 8000 + Math.floor(rand() * 1000)
    if (!ep.servers) ep.servers = new Set()
    await ep.sbx.commands.run(`mkdir -p /tmp/www${port} && echo hi${port} > /tmp/www${port}/i.txt && cd /tmp/www${port} && python3 -m http.server ${port} >/dev/null 2>&1`, { background: true, timeoutMs: 0 })
    let last
    for (let i = 0; i < 100; i++) {
      const r = await fetch(`${api}/i.txt`, { headers: { 'E2b-Sandbox-Id': ep.sbx.sandboxId, 'E2b-Sandbox-Port': String(port) } })
      last = `${r.status} ${await r.text()}`
      if (r.status === 200) break
      await sleep(100)
    }
    expect(last === `200 hi${port}\n`, `GET through the port proxy: ${last}`)
  },
  async info(ep) {
    await ep.sbx.setTimeout(60_000 + Math.floor(rand() * 60_000))
    const info = await ep.sbx.getInfo()
    expect(info.sandboxId === ep.sbx.sandboxId, `getInfo: ${JSON.stringify(info)}`)
    const page = await Sandbox.list({ query: { metadata: { worker: ep.worker } } }).nextItems()
    expect(page.some((s) => s.sandboxId === ep.sbx.sandboxId), `not listed`)
  },
}

// The ways an episode ends.
const ends = {
  async kill(ep) {
    expect((await ep.sbx.kill()) === true, 'kill said false')
  },
  async killBusy(ep) {
    // Killed with a command running: the command's wait ends.
    const h = await ep.sbx.commands.run('sleep 600', { background: true, timeoutMs: 0 })
    const waited = h.wait().then(
      () => 'exited cleanly',
      () => null,
    )
    expect((await ep.sbx.kill()) === true, 'kill said false')
    const w = await Promise.race([waited, sleep(30000).then(() => 'still waiting 30 s after the kill')])
    expect(w === null, `a command of a killed sandbox: ${w}`)
  },
  async killDuring(ep) {
    // A kill racing a rollback, a fork or a checkpoint of the same
    // sandbox: each ends, with its result or an error, and nothing stays.
    let other
    if (checkpointable.has(ep.template) && ep.handles.length && rand() < 0.5) {
      other = gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/rollback`, { handle: ep.handles[ep.handles.length - 1] })
    } else if (checkpointable.has(ep.template) && rand() < 0.5) {
      other = gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/fork`, { count: 1 })
    } else {
      other = gvx('POST', `/gvx/v1/sandboxes/${ep.sbx.sandboxId}/checkpoints`, { async: rand() < 0.5 })
    }
    other.catch(() => {}) // awaited below; not unhandled meanwhile
    await sleep(rand() * 150)
    const killed = await ep.sbx.kill()
    const r = await other
    if (r.status === 201 && Array.isArray(r.data)) {
      for (const s of r.data) {
        const child = await Sandbox.connect(s.sandboxID)
        expect((await child.kill()) === true, `kill of fork ${s.sandboxID} said false`)
      }
    } else if (r.status === 201 && r.data?.handle) {
      ep.handles.push(r.data.handle)
    }
    expect(r.status < 500, `the call beside the kill: ${r.status} ${JSON.stringify(r.data)}`)
    expect((await ep.sbx.isRunning()) === false, `still running after a kill (kill said ${killed}; the other call ${r.status})`)
  },
  async expireBusy(ep) {
    // The sandbox's end time comes while a command runs.
    const run = ep.sbx.commands.run('sleep 600', { timeoutMs: 0 }).then(
      () => 'exited cleanly',
      () => null,
    )
    await ep.sbx.setTimeout(1500)
    const w = await Promise.race([run, sleep(30000).then(() => 'still running 28 s after the end time')])
    expect(w === null, `a command of an expired sandbox: ${w}`)
    expect((await ep.sbx.isRunning()) === false, 'still running after its end time')
  },
  async expire(ep) {
    await ep.sbx.setTimeout(1500)
    await sleep(4000)
    // A service restarted meanwhile ends it at its first round after the
    // start.
    for (let i = 0; process.env.CHAOS_OUTAGE === '1' && i < 50 && (await ep.sbx.isRunning()); i++) await sleep(200)
    expect((await ep.sbx.isRunning()) === false, 'still running 2.5 s after its timeout')
    try {
      await Sandbox.connect(ep.sbx.sandboxId)
      throw new Error('connect to an expired sandbox worked')
    } catch (e) {
      expect(e instanceof NotFoundError || /not found/i.test(String(e)), `connect to an expired sandbox: ${e}`)
    }
  },
}

// isOutage says whether e is the service being down (CHAOS_OUTAGE: the
// test crashes and restarts it).
function isOutage(e) {
  return /fetch failed|ECONNREFUSED|ECONNRESET|socket hang up|other side closed|terminated|UND_ERR/i.test(`${e} ${e?.cause}`)
}

// abandon kills an episode's sandbox once the service answers again.
async function abandon(ep) {
  for (let i = 0; i < 100; i++) {
    try {
      await ep.sbx.kill()
      return
    } catch {
      await sleep(200)
    }
  }
  finding('abandon', ep.sbx, 'could not kill the sandbox after the outage')
}

// Episodes take the templates, a first operation and an end in turn
// (k counts them), so that a short run does each; the rest is random.
let episodes = 0
const endNames = ['kill', 'killBusy', 'expire', 'killDuring', 'expireBusy', 'kill', 'killDuring']

async function episode(worker) {
  const k = episodes++
  const template = templates[k % templates.length]
  count(`create:${template}`)
  const ep = { worker: String(worker), template, handles: [] }
  try {
    ep.sbx = await Sandbox.create(template, { timeoutMs: 120_000, metadata: { worker: String(worker) } })
  } catch (e) {
    if (process.env.CHAOS_OUTAGE === '1' && isOutage(e)) {
      count(`create:outage`)
      await sleep(200)
      return
    }
    finding(`create:${template}`, null, e)
    return
  }
  const n = 2 + Math.floor(rand() * 6)
  const names = Object.keys(ops)
  const outage = process.env.CHAOS_OUTAGE === '1'
  for (let i = 0; i < n; i++) {
    // A NAT template's sandbox serves a port first.
    const op = i === 0 ? (template.startsWith('py') ? 'port' : names[k % names.length]) : pick(names)
    try {
      // false: the operation does not apply to the template.
      count((await ops[op](ep)) === false ? `${op}:n/a` : op)
    } catch (e) {
      if (outage && isOutage(e)) {
        count(`${op}:outage`)
        await abandon(ep)
        return
      }
      finding(op, ep.sbx, e)
      break
    }
  }
  const end = endNames[k % endNames.length]
  try {
    await ends[end](ep)
    count(end)
  } catch (e) {
    if (outage && isOutage(e)) {
      count(`${end}:outage`)
      await abandon(ep)
      return
    }
    finding(end, ep.sbx, e)
    await ep.sbx.kill().catch(() => {})
  }
  for (const h of ep.handles) await gvx('DELETE', `/gvx/v1/checkpoints/${h}`).catch(() => {})
}

// shared: every worker drives one sandbox at once — commands, files,
// checkpoints, rollbacks and forks racing each other. Results cannot be
// checked against each other (a rollback may undo a write or kill a
// command at any time), so a finding is a 5xx, an error of a kind no
// call should give, or a call that hangs; at the end the sandbox must
// still answer.
async function shared() {
  const template = templates.find((t) => checkpointable.has(t))
  const sbx = await Sandbox.create(template, { timeoutMs: (seconds + 120) * 1000 })
  const handles = []
  // A command a rollback kills ends with its signal's exit: the only
  // error a call may give here.
  // With CHAOS_PAUSE=1, calls that meet the sandbox paused fail saying
  // so (the SDK's not-running errors).
  const pausing = process.env.CHAOS_PAUSE === '1'
  const tolerated = (e) =>
    e instanceof CommandExitError || (pausing && /sandbox is paused|not running anymore/i.test(String(e)) && !/cannot exec in a paused state/.test(String(e)))
  const sharedOps = {
    async run() {
      await sbx.commands.run(`echo ${Math.floor(rand() * 1e9)} > /tmp/v; cat /tmp/v`)
    },
    async files() {
      await sbx.files.write(`/tmp/s${Math.floor(rand() * 4)}`, 'x'.repeat(Math.floor(rand() * 100000)))
      await sbx.files.read(`/tmp/s${Math.floor(rand() * 4)}`).catch((e) => {
        if (!(e instanceof NotFoundError)) throw e
      })
    },
    async checkpoint() {
      const r = await gvx('POST', `/gvx/v1/sandboxes/${sbx.sandboxId}/checkpoints`, { async: rand() < 0.5 })
      expect(r.status === 201 || r.status === 409, `checkpoint: ${r.status} ${JSON.stringify(r.data)}`)
      if (r.status === 201) handles.push(r.data.handle)
    },
    async rollback() {
      if (!handles.length) return
      const r = await gvx('POST', `/gvx/v1/sandboxes/${sbx.sandboxId}/rollback`, { handle: pick(handles) })
      expect(r.status === 200 || r.status === 409 || r.status === 404, `rollback: ${r.status} ${JSON.stringify(r.data)}`)
    },
    async release() {
      if (handles.length < 3) return
      const h = handles.splice(Math.floor(rand() * handles.length), 1)[0]
      const r = await gvx('DELETE', `/gvx/v1/checkpoints/${h}`)
      expect(r.status === 204 || r.status === 404 || r.status === 409, `release: ${r.status} ${JSON.stringify(r.data)}`)
    },
    async fork() {
      const body = handles.length && rand() < 0.5 ? { count: 1, handle: pick(handles) } : { count: 1 }
      const r = await gvx('POST', `/gvx/v1/sandboxes/${sbx.sandboxId}/fork`, body)
      expect(r.status === 201 || r.status === 409 || r.status === 404, `fork: ${r.status} ${JSON.stringify(r.data)}`)
      if (r.status !== 201) return
      for (const s of r.data) {
        const child = await Sandbox.connect(s.sandboxID)
        await child.commands.run('true')
        expect((await child.kill()) === true, `kill of fork ${s.sandboxID} said false`)
      }
    },
    async pause() {
      if (process.env.CHAOS_PAUSE !== '1') return false
      const paused = await sbx.pause()
      await sleep(rand() * 200)
      await Sandbox.connect(sbx.sandboxId)
      if (!paused) count('pause:not-paused')
    },
    async background() {
      const h = await sbx.commands.run('sleep 30', { background: true, timeoutMs: 0 })
      await sleep(rand() * 300)
      await sbx.commands.kill(h.pid)
      await h.wait().catch(() => {})
    },
  }
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (Date.now() < until) {
        const op = pick(Object.keys(sharedOps))
        const t0 = performance.now()
        try {
          const r = await Promise.race([sharedOps[op](), sleep(120000).then(() => Promise.reject(new Error('hung for 120 s')))])
          count(r === false ? `${op}:n/a` : op)
        } catch (e) {
          if (tolerated(e)) count(`${op}:tolerated`)
          else finding(op, sbx, e)
        }
        if (performance.now() - t0 > 60000) finding(op, sbx, `took ${(performance.now() - t0).toFixed(0)} ms`)
      }
    }),
  )
  try {
    const r = await sbx.commands.run('echo alive')
    expect(r.stdout === 'alive\n', `at the end: ${JSON.stringify(r.stdout)}`)
  } catch (e) {
    finding('end', sbx, e)
  }
  expect((await sbx.kill()) === true, 'kill said false')
  for (const h of handles) await gvx('DELETE', `/gvx/v1/checkpoints/${h}`).catch(() => {})
}

const until = Date.now() + seconds * 1000
console.log(`chaos: ${workers} workers, ${seconds} s, seed ${seed}, templates ${templates}, mode ${process.env.CHAOS_MODE || 'episodes'}`)
if (process.env.CHAOS_MODE === 'shared') {
  await shared()
} else {
  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      while (Date.now() < until) await episode(w)
    }),
  )
}
// (A create cut by an outage made a sandbox whose id never came back:
// the test removes those.)
const left = process.env.CHAOS_OUTAGE === '1' ? [] : await Sandbox.list().nextItems()
if (left.length) finding('list', null, `sandboxes left: ${left.map((s) => s.sandboxId)}`)
console.log(`chaos ${JSON.stringify({ counts, findings: findings.length })}`)
process.exit(findings.length ? 1 : 0)
