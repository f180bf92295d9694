// E2B's network options through the official e2b JS SDK against gvx
// serve: allowInternetAccess and network.allowOut/denyOut narrow a NAT
// template's egress policy. Env: E2B_* as sdk.mjs, E2B_TEMPLATE (a
// template of network "nat" whose policy admits 10.0.2.2:PORT_OK and
// 10.0.2.2:PORT_OK2 and refuses 10.0.2.2:PORT_OFF), and the three ports:
// servers the Go test runs on the host's 127.0.0.1, which count the
// connections they get; E2B_PY_TEMPLATE, a NAT template with python3.
// Every step asserts and prints one line.
import assert from 'node:assert/strict'
import { step, summary } from './steps.mjs'
const { Sandbox, ALL_TRAFFIC } = await import(process.env.E2B_MODULE || 'e2b')

const template = process.env.E2B_TEMPLATE || 'net'
const ok = process.env.PORT_OK, ok2 = process.env.PORT_OK2, off = process.env.PORT_OFF

// ask asks the host's server on port through 10.0.2.2 with bash's
// /dev/tcp: its answer, or the shell's error.
async function ask(sbx, port) {
  const cmd = `exec 3<>/dev/tcp/10.0.2.2/${port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3`
  const r = await sbx.commands.run(`bash -c "${cmd}" 2>&1; echo "exit=$?"`)
  return r.stdout
}

const reached = (out) => out.includes('hello from the host') && out.includes('exit=0')
const refused = (out) => out.includes('Connection refused') && !out.includes('hello from the host')

const kill = []
try {
  await step('default: the template policy', async () => {
    const sbx = await Sandbox.create(template)
    kill.push(sbx)
    assert.ok(reached(await ask(sbx, ok)), 'the allowed port')
    assert.ok(refused(await ask(sbx, off)), 'the port the template refuses')
    assert.equal((await sbx.getInfo()).allowInternetAccess, true)
  })

  await step('allowInternetAccess: false', async () => {
    const sbx = await Sandbox.create(template, { allowInternetAccess: false })
    kill.push(sbx)
    assert.ok(refused(await ask(sbx, ok)))
    assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  })

  await step('denyOut ALL_TRAFFIC, allowOut one port of the host', async () => {
    const sbx = await Sandbox.create(template, { network: { denyOut: [ALL_TRAFFIC], allowOut: [`10.0.2.2:${ok}`] } })
    kill.push(sbx)
    assert.ok(reached(await ask(sbx, ok)), 'allowOut wins over denyOut')
    assert.ok(refused(await ask(sbx, ok2)), 'the rest is denied')
  })

  await step('allowOut opens nothing the template refuses', async () => {
    const sbx = await Sandbox.create(template, { network: { allowOut: [`10.0.2.2:${off}`] } })
    kill.push(sbx)
    assert.ok(refused(await ask(sbx, off)))
    assert.ok(reached(await ask(sbx, ok2)))
  })

  await step('denyOut alone', async () => {
    const sbx = await Sandbox.create(template, { network: { denyOut: ['10.0.2.2/32'] } })
    kill.push(sbx)
    assert.ok(refused(await ask(sbx, ok)))
  })

  await step('updateNetwork narrows a running sandbox, and {} lifts it', async () => {
    const sbx = await Sandbox.create(template)
    kill.push(sbx)
    await sbx.updateNetwork({ allowInternetAccess: false })
    assert.ok(refused(await ask(sbx, ok)))
    assert.equal((await sbx.getInfo()).allowInternetAccess, false)
    await sbx.updateNetwork({})
    assert.ok(reached(await ask(sbx, ok)))
    assert.equal((await sbx.getInfo()).allowInternetAccess, true)
  })

  await step('a sandbox port through the service, private with its traffic token', async () => {
    const sbx = await Sandbox.create(process.env.E2B_PY_TEMPLATE, { network: { allowPublicTraffic: false } })
    kill.push(sbx)
    assert.ok(sbx.trafficAccessToken, 'a private sandbox has a traffic token')
    await sbx.commands.run('mkdir -p ~/www && printf "hello from the guest" > ~/www/index.html')
    await sbx.commands.run('cd ~/www && exec python3 -m http.server 8000', { background: true })
    const url = `${process.env.E2B_SANDBOX_URL}/index.html`
    const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' }
    let res
    for (let i = 0; i < 100; i++) {
      res = await fetch(url, { headers: { ...headers, 'e2b-traffic-access-token': sbx.trafficAccessToken } })
      if (res.status === 200) break
      await res.text()
      await new Promise((r) => setTimeout(r, 100))
    }
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'hello from the guest')
    const denied = await fetch(url, { headers })
    assert.equal(denied.status, 403)
    await denied.text()
    assert.match(sbx.getHost(8000), new RegExp(`^8000-${sbx.sandboxId}\\.`))
  })

  await step('egressProxy is refused by name', async () => {
    await assert.rejects(Sandbox.create(template, { network: { egressProxy: { address: 'proxy.invalid:1080' } } }), /egressProxy/)
  })
} finally {
  for (const sbx of kill) await sbx.kill()
}

summary()
