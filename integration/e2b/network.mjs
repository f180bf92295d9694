// E2B's network options through the official e2b JS SDK against gvx
// serve: allowInternetAccess and network.allowOut/denyOut narrow a NAT
// template's egress policy. Env: E2B_* as sdk.mjs, E2B_TEMPLATE (a
// template of network "nat" whose policy admits 10.0.2.2:PORT_OK and
// 10.0.2.2:PORT_OK2 and refuses 10.0.2.2:PORT_OFF), and the three ports:
// servers the Go test runs on the host's 127.0.0.1, which count the
// connections they get. Every step asserts and prints one line.
import assert from 'node:assert/strict'
import { step, summary } from './steps.mjs'
const { Sandbox, ALL_TRAFFIC } = await import(process.env.E2B_MODULE || 'e2b')

const template = process.env.E2B_TEMPLATE || 'net'
const ok = process.env.PORT_OK, ok2 = process.env.PORT_OK2, off = process.env.PORT_OFF

// fetch asks the host's server on port through 10.0.2.2 with bash's
// /dev/tcp: its answer, or the shell's error.
async function fetch(sbx, port) {
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
    assert.ok(reached(await fetch(sbx, ok)), 'the allowed port')
    assert.ok(refused(await fetch(sbx, off)), 'the port the template refuses')
    assert.equal((await sbx.getInfo()).allowInternetAccess, true)
  })

  await step('allowInternetAccess: false', async () => {
    const sbx = await Sandbox.create(template, { allowInternetAccess: false })
    kill.push(sbx)
    assert.ok(refused(await fetch(sbx, ok)))
    assert.equal((await sbx.getInfo()).allowInternetAccess, false)
  })

  await step('denyOut ALL_TRAFFIC, allowOut one port of the host', async () => {
    const sbx = await Sandbox.create(template, { network: { denyOut: [ALL_TRAFFIC], allowOut: [`10.0.2.2:${ok}`] } })
    kill.push(sbx)
    assert.ok(reached(await fetch(sbx, ok)), 'allowOut wins over denyOut')
    assert.ok(refused(await fetch(sbx, ok2)), 'the rest is denied')
  })

  await step('allowOut opens nothing the template refuses', async () => {
    const sbx = await Sandbox.create(template, { network: { allowOut: [`10.0.2.2:${off}`] } })
    kill.push(sbx)
    assert.ok(refused(await fetch(sbx, off)))
    assert.ok(reached(await fetch(sbx, ok2)))
  })

  await step('denyOut alone', async () => {
    const sbx = await Sandbox.create(template, { network: { denyOut: ['10.0.2.2/32'] } })
    kill.push(sbx)
    assert.ok(refused(await fetch(sbx, ok)))
  })

  await step('updateNetwork narrows a running sandbox, and {} lifts it', async () => {
    const sbx = await Sandbox.create(template)
    kill.push(sbx)
    await sbx.updateNetwork({ allowInternetAccess: false })
    assert.ok(refused(await fetch(sbx, ok)))
    assert.equal((await sbx.getInfo()).allowInternetAccess, false)
    await sbx.updateNetwork({})
    assert.ok(reached(await fetch(sbx, ok)))
    assert.equal((await sbx.getInfo()).allowInternetAccess, true)
  })

  await step('egressProxy is refused by name', async () => {
    await assert.rejects(Sandbox.create(template, { network: { egressProxy: { address: 'proxy.invalid:1080' } } }), /egressProxy/)
  })
} finally {
  for (const sbx of kill) await sbx.kill()
}

summary()
