// Reference side of the GPT-2 parity test and benchmark: gpt-3-encoder under node.
//
//   node gpt3_encoder_ref.js ids   ENCODER_JS TEXT OUT   ids of TEXT, one per line, into OUT
//   node gpt3_encoder_ref.js bench ENCODER_JS TEXT       prints "MB/s bytes tokens seconds cpu-MB/s"
//   node gpt3_encoder_ref.js unicode SEED BYTES OUT      writes random multilingual text
//
// gpt-3-encoder's encode() appends with Array.concat once per pre-token, which is
// quadratic in the length of its input, so the text goes in as chunks cut where the
// cut cannot change pre-tokens: after a "\n" that has non-space on both sides (the
// "\n" is then a pre-token of its own whether or not the text continues).
'use strict';
const fs = require('fs');

function chunks(text) {
  return text.split(/(?<=\S\n)(?=\S)/u);
}

const [mode, a, b, c] = process.argv.slice(2);
if (mode === 'ids' || mode === 'bench') {
  const enc = require(require('path').resolve(a));
  const text = fs.readFileSync(b, 'utf8');
  const parts = chunks(text);
  const ids = [];
  const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
  for (const p of parts) for (const id of enc.encode(p)) ids.push(id);
  const sec = Number(process.hrtime.bigint() - t0) / 1e9;
  const c1 = process.cpuUsage(c0), cpu = (c1.user + c1.system) / 1e6;
  if (mode === 'ids') {
    fs.writeFileSync(c, ids.join('\n') + '\n');
  } else {
    const bytes = Buffer.byteLength(text, 'utf8');
    console.log((bytes / sec / 1e6).toFixed(2), bytes, ids.length, sec.toFixed(3), (bytes / cpu / 1e6).toFixed(2));
  }
} else if (mode === 'unicode') {
  // Lines of random "words": code points from every plane in use, ASCII letters and
  // digits, every kind of white space JavaScript knows (and U+0085, which it does not
  // count), apostrophes and contractions. Lines start and end with a letter so that
  // the chunking above can cut between them.
  let s = BigInt(a) || 1n;
  const rnd = (n) => {  // xorshift64*, deterministic across node versions
    s ^= s >> 12n; s ^= (s << 25n) & 0xffffffffffffffffn; s ^= s >> 27n;
    return Number(((s * 0x2545F4914F6CDD1Dn) & 0xffffffffffffffffn) >> 11n) % n;
  };
  const spaces = [' ', ' ', ' ', ' ', '  ', '\t', '\u00a0', '\u3000', '\ufeff', '\u0085', '\u2028', '\u200b',
                  '\r\n', '\n\n', ' \n ', '\u000b', '\u000c', '\u1680', '\u2007', '\u202f', '\u205f', '   '];
  const pieces = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'", "''", "'S", '123', '4.5', '\u0661\u0662',
                  '\u00bd', '\u2167', '...', '!?', '"', '--', '$', '\u00e9t\u00e9', 'na\u00efve'];
  const randomChar = () => {
    for (;;) {
      const r = rnd(10);
      const cp = r < 5 ? rnd(0x3000) : r < 7 ? 0x3000 + rnd(0xd000) : r < 9 ? 0x10000 + rnd(0x20000) :
                 0xe0000 + rnd(0x200);
      if (cp >= 0xd800 && cp <= 0xdfff) continue;  // no surrogates in UTF-8
      return String.fromCodePoint(cp);
    }
  };
  const out = [];
  let bytes = 0;
  while (bytes < Number(b)) {
    let line = 'A';
    const words = 1 + rnd(12);
    for (let w = 0; w < words; w++) {
      const k = rnd(4);
      if (k === 0) line += pieces[rnd(pieces.length)];
      else if (k === 1) line += 'abcdefghijklmnopqrstuvwxyz'.slice(rnd(20), 20 + rnd(6));
      else for (let i = 1 + rnd(6); i > 0; i--) line += randomChar();
      line += spaces[rnd(spaces.length)];
    }
    line += 'z\n';
    out.push(line);
    bytes += Buffer.byteLength(line, 'utf8');
  }
  fs.writeFileSync(c, out.join(''));
} else {
  console.error('usage: node gpt3_encoder_ref.js ids|bench|unicode ...');
  process.exit(2);
}
