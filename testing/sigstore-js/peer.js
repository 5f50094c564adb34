// peer.js: sigstore-js as the independent peer of Steward's Sigstore bundles (see README.md).
//
//   node peer.js verify BUNDLE.json KEY.pub sha256:<hex>
//       Verifies the bundle with sigstore-js's verifier and the public key alone (offline: no
//       transparency log, no timestamps), then that its DSSE payload is the in-toto statement
//       `cosign sign` signs, naming the digest.  Exit 0 and "verified", or exit 1 and why.
//   node peer.js sign KEY.pem sha256:<hex>
//       Prints the bundle sigstore-js's DSSE bundle builder makes of that statement, signed
//       with the PEM private key (what `cosign sign --key` makes, minus the log entry).
//
// Run with NODE_PATH set to what `install` prints.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const { bundleFromJSON, bundleToJSON } = require('@sigstore/bundle');
const { DSSEBundleBuilder } = require('@sigstore/sign');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

const IN_TOTO = 'application/vnd.in-toto+json';
const STATEMENT = 'https://in-toto.io/Statement/v1';
const PREDICATE = 'https://sigstore.dev/cosign/sign/v1';

function statement(digest) {
  const [alg, hex] = digest.split(':');
  return { _type: STATEMENT, subject: [{ digest: { [alg]: hex } }], predicateType: PREDICATE, predicate: {} };
}

function verify(bundleFile, keyFile, digest) {
  const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(bundleFile, 'utf8')));
  const key = crypto.createPublicKey(fs.readFileSync(keyFile));
  const root = { mediaType: '', certificateAuthorities: [], ctlogs: [], tlogs: [], timestampAuthorities: [] };
  const trust = toTrustMaterial(root, () => ({ publicKey: key, validFor: () => true }));
  const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
  verifier.verify(toSignedEntity(bundle));
  if (bundle.content.$case !== 'dsseEnvelope') throw new Error(`not a DSSE bundle: ${bundle.content.$case}`);
  const env = bundle.content.dsseEnvelope;
  if (env.payloadType !== IN_TOTO) throw new Error(`payload type ${env.payloadType}`);
  const s = JSON.parse(env.payload.toString('utf8'));
  if (s._type !== STATEMENT) throw new Error(`statement type ${s._type}`);
  if (s.predicateType !== PREDICATE) throw new Error(`predicate type ${s.predicateType}`);
  const [alg, hex] = digest.split(':');
  if (!(s.subject || []).some((x) => x.digest && x.digest[alg] === hex)) {
    throw new Error(`no subject names ${digest}: ${JSON.stringify(s.subject)}`);
  }
  console.log('verified');
}

async function sign(keyFile, digest) {
  const priv = crypto.createPrivateKey(fs.readFileSync(keyFile));
  const pub = crypto.createPublicKey(priv);
  const hint = crypto.createHash('sha256').update(pub.export({ type: 'spki', format: 'der' })).digest('base64');
  const signer = {
    sign: async (data) => ({
      signature: crypto.sign('sha256', data, priv),
      key: { $case: 'publicKey', publicKey: pub.export({ type: 'spki', format: 'pem' }), hint },
    }),
  };
  const builder = new DSSEBundleBuilder({ signer, witnesses: [] });
  const bundle = await builder.create({ data: Buffer.from(JSON.stringify(statement(digest))), type: IN_TOTO });
  console.log(JSON.stringify(bundleToJSON(bundle)));
}

async function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === 'verify' && args.length === 3) return verify(...args);
  if (cmd === 'sign' && args.length === 2) return sign(...args);
  throw new Error('usage: peer.js verify BUNDLE.json KEY.pub sha256:<hex> | peer.js sign KEY.pem sha256:<hex>');
}

main().catch((e) => {
  console.error(`peer: ${e.message}`);
  process.exit(1);
});
