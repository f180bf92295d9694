// The official e2b JS SDK against gvx serve, configured only through the
// environment: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (and
// E2B_TEMPLATE, default "base"). Run by integration/serve_test.go; every
// step asserts on its result and prints one line; any failure exits 1.
import assert from 'node:assert/strict'
import { step, summary } from './steps.mjs'
// E2B_MODULE: where the e2b package is (the test's npm cache); default 'e2b'.
const { Sandbox, CommandExitError, NotFoundError } = await import(process.env.E2B_MODULE || 'e2b')

const template = process.env.E2B_TEMPLATE || 'base'

let sbx
await step('Sandbox.create', async () => {
  sbx = await Sandbox.create(template, { metadata: { suite: 'gvx' } })
  assert.match(sbx.sandboxId, /^[a-z0-9]+$/)
})

await step('commands.run foreground with onStdout', async () => {
  const chunks = []
  const r = await sbx.commands.run('echo hi; echo err 1>&2; whoami; pwd', { onStdout: (d) => chunks.push(d) })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hi\nuser\n/home/user\n')
  assert.equal(r.stderr, 'err\n')
  assert.ok(chunks.join('').includes('hi\n'), `onStdout got ${JSON.stringify(chunks)}`)
})

await step('commands.run non-zero exit throws CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo out; exit 7'), (e) => {
    assert.ok(e instanceof CommandExitError, `${e}`)
    assert.equal(e.exitCode, 7)
    assert.equal(e.stdout, 'out\n')
    return true
  })
})

await step('commands.run background with onStdout', async () => {
  const seen = []
  const h = await sbx.commands.run('echo line-1; sleep 0.3; echo line-2', {
    background: true,
    onStdout: (d) => seen.push(d),
  })
  assert.ok(h.pid > 0)
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(seen.join(''), 'line-1\nline-2\n')
})

await step('commands: stdin, list and kill of a background command', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true, timeoutMs: 0 })
  await sbx.commands.sendStdin(h.pid, 'ping\n')
  // The input reaches cat, whose echo comes back on the stream (tens of
  // ms on a busy machine): a kill sent before that would end cat first.
  for (let i = 0; i < 500 && h.stdout === ''; i++) await new Promise((r) => setTimeout(r, 20))
  assert.equal(h.stdout, 'ping\n')
  const list = await sbx.commands.list()
  assert.ok(list.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(list)}`)
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait())
  assert.equal(h.stdout, 'ping\n')
  assert.equal(await sbx.commands.kill(h.pid), false)
})

await step('files.write / read / list', async () => {
  const info = await sbx.files.write('/home/user/a.txt', 'hello gvx\n')
  assert.equal(info.path, '/home/user/a.txt')
  assert.equal(await sbx.files.read('/home/user/a.txt'), 'hello gvx\n')
  const entries = await sbx.files.list('/home/user')
  const a = entries.find((e) => e.name === 'a.txt')
  assert.ok(a, `a.txt not listed: ${JSON.stringify(entries)}`)
  assert.equal(a.type, 'file')
  assert.equal(a.size, 10)
  assert.equal(a.owner, 'user')
  // Written as the default user: the user's commands can change it.
  const r = await sbx.commands.run('echo more >> a.txt && cat a.txt')
  assert.equal(r.stdout, 'hello gvx\nmore\n')
  assert.equal(await sbx.files.exists('/home/user/a.txt'), true)
  assert.equal(await sbx.files.makeDir('/home/user/d/e'), true)
  assert.equal(await sbx.files.makeDir('/home/user/d/e'), false)
})

await step('files.read of a missing file throws NotFoundError', async () => {
  await assert.rejects(sbx.files.read('/home/user/missing.txt'), (e) => {
    assert.ok(e instanceof NotFoundError, `${e}`)
    return true
  })
  assert.equal(await sbx.files.exists('/home/user/missing.txt'), false)
})

await step('setTimeout and getInfo', async () => {
  await sbx.setTimeout(120_000)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, template)
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { suite: 'gvx' })
  const left = new Date(info.endAt).getTime() - Date.now()
  assert.ok(left > 100_000 && left <= 121_000, `endAt ${info.endAt} is ${left} ms away, want ~120 s`)
})

await step('Sandbox.list', async () => {
  const page = await Sandbox.list().nextItems()
  assert.ok(page.some((s) => s.sandboxId === sbx.sandboxId), `not listed: ${JSON.stringify(page)}`)
  const filtered = await Sandbox.list({ query: { metadata: { suite: 'none' } } }).nextItems()
  assert.equal(filtered.length, 0)
})

await step('pause twice', async () => {
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false)
  assert.equal(await sbx.isRunning(), false)
})

await step('Sandbox.connect resumes', async () => {
  const again = await Sandbox.connect(sbx.sandboxId)
  assert.equal(again.sandboxId, sbx.sandboxId)
  assert.equal(await again.isRunning(), true)
  const r = await again.commands.run('cat /home/user/a.txt')
  assert.equal(r.stdout, 'hello gvx\nmore\n')
})

await step('isRunning', async () => {
  assert.equal(await sbx.isRunning(), true)
})

await step('kill twice', async () => {
  assert.equal(await sbx.kill(), true)
  assert.equal(await sbx.kill(), false)
  assert.equal(await sbx.isRunning(), false)
})

summary()
