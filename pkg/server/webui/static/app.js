// serve's web page: chat through /v1/chat/completions (streamed), and the
// live panel from /v1/live. No framework: state lives in a few variables
// and localStorage, and every piece of model text is put on the page with
// textContent (markdown.js), never as HTML.
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const STORE = 'nvmai.conversations.v1';
const SETTINGS = 'nvmai.settings.v1';
const KEY = 'nvmai.apiKey';

// ---- state ---------------------------------------------------------------

let conversations = load(STORE, []);
let settings = load(SETTINGS, { current: null, model: '', theme: '' });
let controller = null; // the running request's AbortController
let models = [];

function load(key, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(key));
    return v ?? fallback;
  } catch {
    return fallback;
  }
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(conversations));
    localStorage.setItem(SETTINGS, JSON.stringify(settings));
  } catch (e) {
    setStatus('could not save the conversations in this browser: ' + e.message, true);
  }
}

function current() {
  let c = conversations.find((c) => c.id === settings.current);
  if (!c) {
    c = newConversation();
  }
  return c;
}

function newConversation() {
  const c = { id: 'c' + Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New conversation', created: new Date().toISOString(), system: $('system').value, messages: [] };
  conversations.unshift(c);
  settings.current = c.id;
  return c;
}

// ---- API -------------------------------------------------------------------

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const key = sessionStorage.getItem(KEY);
  if (key) h['Authorization'] = 'Bearer ' + key;
  return h;
}

// api fetches path; a 401 asks for the key once and retries.
async function api(path, init = {}) {
  for (let attempt = 0; ; attempt++) {
    const resp = await fetch(path, { ...init, headers: headers(init.body !== undefined) });
    if (resp.status === 401 && attempt === 0) {
      await askKey();
      continue;
    }
    return resp;
  }
}

let keyWaiters = [];
function askKey() {
  const bar = $('keybar');
  bar.hidden = false;
  $('apikey').focus();
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$('keybar').addEventListener('submit', (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $('apikey').value.trim());
  $('apikey').value = '';
  $('keybar').hidden = true;
  const w = keyWaiters;
  keyWaiters = [];
  w.forEach((r) => r());
  startLive();
});

async function errorText(resp) {
  const body = await resp.text();
  try {
    const e = JSON.parse(body).error;
    if (e && e.message) return `${resp.status}: ${e.message}`;
  } catch {}
  return `${resp.status}: ${body.slice(0, 300)}`;
}

// sse reads a text/event-stream body and calls onData with each data field.
async function sse(resp, onData) {
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = frame.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) onData(data);
    }
  }
}

async function loadModels() {
  const sel = $('model');
  try {
    const resp = await api('/v1/models');
    if (!resp.ok) throw new Error(await errorText(resp));
    models = (await resp.json()).data || [];
  } catch (e) {
    setStatus('could not list the models: ' + e.message, true);
    return;
  }
  sel.replaceChildren();
  for (const m of models) {
    const o = document.createElement('option');
    o.value = m.id;
    o.textContent = m.context_length ? `${m.id} (${Math.round(m.context_length / 1024)}k)` : m.id;
    sel.appendChild(o);
  }
  if (models.some((m) => m.id === settings.model)) sel.value = settings.model;
  settings.model = sel.value;
}

$('model').addEventListener('change', () => {
  settings.model = $('model').value;
  save();
});

// ---- chat ------------------------------------------------------------------

async function send() {
  const text = $('input').value;
  if (!text.trim() || controller) return;
  const conv = current();
  conv.system = $('system').value;
  if (conv.messages.length === 0) conv.title = text.trim().slice(0, 60);
  conv.messages.push({ role: 'user', content: text });
  const reply = { role: 'assistant', content: '', reasoning: '', tool_calls: [], model: $('model').value, streaming: true };
  conv.messages.push(reply);
  $('input').value = '';
  save();
  renderConversations();
  renderMessages();
  const view = lastBubble();

  const body = {
    model: $('model').value,
    messages: wireMessages(conv),
    stream: true,
    stream_options: { include_usage: true },
  };
  const t = $('temperature').value;
  if (t !== '') body.temperature = Number(t);
  if ($('effort').value) body.reasoning_effort = $('effort').value;

  controller = new AbortController();
  setBusy(true);
  setStatus('waiting for the model…');
  try {
    const resp = await api('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body), signal: controller.signal });
    if (!resp.ok) throw new Error(await errorText(resp));
    setStatus('generating…');
    await sse(resp, (data) => {
      if (data === '[DONE]') return;
      let chunk;
      try {
        chunk = JSON.parse(data);
      } catch {
        return;
      }
      if (chunk.error) {
        reply.error = chunk.error.message || 'error';
      }
      for (const ch of chunk.choices || []) {
        const d = ch.delta || {};
        if (d.reasoning_content) reply.reasoning += d.reasoning_content;
        if (d.content) reply.content += d.content;
        for (const tc of d.tool_calls || []) {
          const slot = (reply.tool_calls[tc.index ?? 0] ??= { id: '', name: '', arguments: '' });
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.name += tc.function.name;
          if (tc.function?.arguments) slot.arguments += tc.function.arguments;
        }
        if (ch.finish_reason) reply.finish = ch.finish_reason;
      }
      if (chunk.usage) reply.usage = chunk.usage;
      scheduleBubble(view, reply);
    });
    setStatus(reply.error ? 'the server reported an error' : finishText(reply), !!reply.error);
  } catch (e) {
    if (e.name === 'AbortError') {
      reply.finish = 'stopped';
      setStatus('stopped');
    } else {
      reply.error = e.message;
      setStatus(e.message, true);
    }
  } finally {
    reply.streaming = false;
    reply.tool_calls = reply.tool_calls.filter(Boolean);
    controller = null;
    setBusy(false);
    save();
    fillBubble(view, reply);
    $('input').focus();
  }
}

function finishText(reply) {
  const u = reply.usage;
  let s = 'done';
  if (reply.finish && reply.finish !== 'stop') s += ` (${reply.finish})`;
  if (u) s += ` · ${u.prompt_tokens} prompt tokens (${u.prompt_tokens_details?.cached_tokens ?? 0} reused) · ${u.completion_tokens} generated`;
  return s;
}

// wireMessages is the conversation as the API takes it. Tool calls the
// page cannot run are not sent back (they would need tool results).
function wireMessages(conv) {
  const out = [];
  if (conv.system.trim()) out.push({ role: 'system', content: conv.system });
  for (const m of conv.messages) {
    if (m.streaming) continue;
    if (m.role === 'assistant' && !m.content) continue;
    out.push({ role: m.role, content: m.content });
  }
  return out;
}

function stop() {
  if (controller) controller.abort();
}

function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  document.body.classList.toggle('busy', busy);
}

function setStatus(text, error = false) {
  const s = $('status');
  s.textContent = text;
  s.classList.toggle('error', error);
}

// ---- rendering -------------------------------------------------------------

function renderMessages() {
  const box = $('messages');
  box.replaceChildren();
  const conv = current();
  $('system').value = conv.system || '';
  if (conv.messages.length === 0) {
    const empty = document.createElement('p');
    empty.className = 'empty';
    empty.textContent = 'Ask something. Conversations stay in this browser.';
    box.appendChild(empty);
  }
  for (const m of conv.messages) {
    const b = document.createElement('article');
    b.className = 'msg ' + m.role;
    box.appendChild(b);
    fillBubble(b, m);
  }
  box.scrollTop = box.scrollHeight;
}

function lastBubble() {
  const all = $('messages').querySelectorAll('article.msg');
  return all[all.length - 1];
}

let pending = null;
function scheduleBubble(view, m) {
  if (pending) return;
  pending = requestAnimationFrame(() => {
    pending = null;
    fillBubble(view, m);
  });
}

function fillBubble(b, m) {
  if (pending && !m.streaming) {
    cancelAnimationFrame(pending);
    pending = null;
  }
  const box = $('messages');
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const openReasoning = b.querySelector('details.reasoning')?.open;
  b.replaceChildren();
  const head = document.createElement('header');
  head.textContent = m.role === 'user' ? 'You' : m.model || 'assistant';
  b.appendChild(head);
  if (m.role === 'user') {
    const p = document.createElement('div');
    p.className = 'text plain';
    p.textContent = m.content;
    b.appendChild(p);
    return;
  }
  if (m.reasoning) {
    const d = document.createElement('details');
    d.className = 'reasoning';
    d.open = !!openReasoning;
    const s = document.createElement('summary');
    s.textContent = m.streaming && !m.content && !m.tool_calls.length ? 'Thinking…' : 'Reasoning';
    d.appendChild(s);
    const body = document.createElement('div');
    body.className = 'text';
    body.appendChild(renderMarkdown(m.reasoning, addCopy));
    d.appendChild(body);
    b.appendChild(d);
  }
  const body = document.createElement('div');
  body.className = 'text';
  body.appendChild(renderMarkdown(m.content, addCopy));
  b.appendChild(body);
  for (const tc of (m.tool_calls || []).filter(Boolean)) {
    const box = document.createElement('div');
    box.className = 'tool-call';
    const h = document.createElement('div');
    h.className = 'tool-name';
    h.textContent = 'tool call: ' + (tc.name || '?');
    box.appendChild(h);
    const pre = document.createElement('pre');
    const code = document.createElement('code');
    code.textContent = prettyJSON(tc.arguments);
    pre.appendChild(code);
    box.appendChild(pre);
    b.appendChild(box);
  }
  if (m.streaming) b.appendChild(Object.assign(document.createElement('span'), { className: 'cursor', textContent: '▍' }));
  if (!m.streaming && !m.error && !m.content && !m.reasoning && !(m.tool_calls || []).length) {
    // A reply of tokens that decode to nothing (an end-of-sequence at once,
    // or a synthetic model's ids beyond its tokenizer).
    const n = m.usage?.completion_tokens;
    b.appendChild(Object.assign(document.createElement('p'), { className: 'note', textContent: `no text` + (n ? ` (${n} tokens generated)` : '') }));
  }
  if (m.finish === 'stopped') b.appendChild(Object.assign(document.createElement('p'), { className: 'note', textContent: 'stopped' }));
  if (m.error) b.appendChild(Object.assign(document.createElement('p'), { className: 'note error', textContent: m.error }));
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function prettyJSON(s) {
  try {
    return JSON.stringify(JSON.parse(s), null, 2);
  } catch {
    return s;
  }
}

function addCopy(pre, code) {
  const btn = document.createElement('button');
  btn.type = 'button';
  btn.className = 'copy';
  btn.textContent = 'Copy';
  btn.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(code.textContent);
    } catch {
      const r = document.createRange();
      r.selectNodeContents(code);
      const sel = getSelection();
      sel.removeAllRanges();
      sel.addRange(r);
      document.execCommand('copy');
    }
    btn.textContent = 'Copied';
    setTimeout(() => (btn.textContent = 'Copy'), 1200);
  });
  pre.appendChild(btn);
}

function renderConversations() {
  const ul = $('conversations');
  ul.replaceChildren();
  for (const c of conversations) {
    const li = document.createElement('li');
    const btn = document.createElement('button');
    btn.type = 'button';
    btn.textContent = c.title || 'New conversation';
    btn.title = new Date(c.created).toLocaleString();
    if (c.id === settings.current) btn.setAttribute('aria-current', 'true');
    btn.addEventListener('click', () => {
      if (controller) return;
      settings.current = c.id;
      save();
      renderConversations();
      renderMessages();
    });
    li.appendChild(btn);
    ul.appendChild(li);
  }
}

$('new-chat').addEventListener('click', () => {
  if (controller) return;
  const c = current();
  if (c.messages.length > 0) newConversation();
  save();
  renderConversations();
  renderMessages();
  $('input').focus();
});

$('clear-chat').addEventListener('click', () => {
  if (controller) return;
  conversations = conversations.filter((c) => c.id !== settings.current);
  settings.current = null;
  current();
  save();
  renderConversations();
  renderMessages();
});

$('export').addEventListener('click', () => {
  const data = JSON.stringify({ exported: new Date().toISOString(), conversations }, null, 2);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([data], { type: 'application/json' }));
  a.download = 'nvmai-conversations.json';
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
});

$('system').addEventListener('change', () => {
  current().system = $('system').value;
  save();
});

// ---- keyboard --------------------------------------------------------------

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  send();
});
$('stop').addEventListener('click', stop);
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
document.addEventListener('keydown', (e) => {
  if (e.key === 'Escape' && controller) {
    e.preventDefault();
    stop();
  }
});

// ---- layout and theme ------------------------------------------------------

function applyTheme() {
  if (settings.theme) document.documentElement.dataset.theme = settings.theme;
  else delete document.documentElement.dataset.theme;
  const dark = settings.theme ? settings.theme === 'dark' : matchMedia('(prefers-color-scheme: dark)').matches;
  $('theme').textContent = dark ? 'Light theme' : 'Dark theme';
}
$('theme').addEventListener('click', () => {
  const dark = settings.theme ? settings.theme === 'dark' : matchMedia('(prefers-color-scheme: dark)').matches;
  settings.theme = dark ? 'light' : 'dark';
  save();
  applyTheme();
});
matchMedia('(prefers-color-scheme: dark)').addEventListener('change', applyTheme);

for (const [button, panel] of [['toggle-sidebar', 'sidebar'], ['toggle-live', 'live']]) {
  $(button).addEventListener('click', () => {
    const open = !$(panel).classList.contains('open');
    $(panel).classList.toggle('open', open);
    $(button).setAttribute('aria-expanded', String(open));
  });
}

// ---- live panel ------------------------------------------------------------

let liveController = null;
let lastLayers = null;

async function startLive() {
  if (liveController) liveController.abort();
  const ctl = new AbortController();
  liveController = ctl;
  while (!ctl.signal.aborted) {
    try {
      const resp = await fetch('/v1/live', { headers: headers(false), signal: ctl.signal });
      if (resp.status === 401) {
        $('live-state').textContent = 'needs the API key';
        return; // the key form restarts it
      }
      if (!resp.ok) throw new Error(await errorText(resp));
      $('live-state').textContent = 'connected';
      await sse(resp, (data) => {
        try {
          showLive(JSON.parse(data));
        } catch (e) {
          console.error(e);
        }
      });
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    $('live-state').textContent = 'reconnecting';
    await new Promise((r) => setTimeout(r, 2000));
  }
}

const fmt = {
  int: (v) => (v == null ? '–' : Math.round(v).toLocaleString('en-US')),
  rate: (v) => (v == null ? '–' : v.toFixed(v < 10 ? 2 : 1) + ' tok/s'),
  secs: (v) => (v == null ? '–' : v < 1 ? (v * 1000).toFixed(0) + ' ms' : v.toFixed(2) + ' s'),
  bytes: (v) => {
    if (v == null) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) {
      v /= 1024;
      i++;
    }
    return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + u[i];
  },
  pct: (v) => (v == null ? '–' : (v * 100).toFixed(1) + ' %'),
};

// put shows text in the element id and keeps the raw value in data-raw
// (what the browser test compares with /metrics).
function put(id, raw, text) {
  const e = $(id);
  e.textContent = text;
  if (raw == null) delete e.dataset.raw;
  else e.dataset.raw = String(raw);
}

function showLive(s) {
  const g = s.generation;
  $('live-state').textContent = s.queue.generating > 0 ? 'generating' : s.queue.waiting > 0 ? 'queued' : 'idle';
  $('live-state').classList.toggle('on', s.queue.generating > 0);
  put('live-model', s.model, s.model ?? 'none loaded');
  put('live-prefill', g?.prefill_tok_s, g?.running ? (g.ttft_s == null ? 'prefilling…' : 'at the end') : fmt.rate(g?.prefill_tok_s));
  put('live-decode', g?.decode_tok_s, fmt.rate(g?.decode_tok_s));
  put('live-ttft', g?.ttft_s, fmt.secs(g?.ttft_s));
  put('live-tokens', g?.tokens, g ? `${fmt.int(g.tokens)} generated · ${fmt.int(g.prompt_tokens)} prompt` : '–');
  put('live-cached', g?.cached_tokens, g?.cached_tokens == null ? '–' : `${fmt.int(g.cached_tokens)} of ${fmt.int(g.prompt_tokens)} prompt tokens`);
  put('live-hitrate', s.expert_cache?.hit_rate, s.expert_cache ? fmt.pct(s.expert_cache.hit_rate) : 'no expert cache');
  put('live-disk', g?.disk_bytes_per_token, fmt.bytes(g?.disk_bytes_per_token));
  put('live-pcie', g?.pcie_bytes_per_token, g?.pcie_bytes_per_token == null ? 'not streamed' : fmt.bytes(g.pcie_bytes_per_token));
  for (const [k, v] of Object.entries(s.totals)) {
    const e = $('total-' + k);
    if (e) put('total-' + k, v, k.endsWith('bytes_read') || k.endsWith('_bytes') ? fmt.bytes(v) : fmt.int(v));
  }
  heat(s.expert_cache);
  memory(s.memory);
}

// heat draws one cell per layer: the hit rate of the hits and misses since
// the previous event (one token while generating), else since load.
function heat(ec) {
  const box = $('heat');
  if (!ec) {
    const none = document.createElement('em');
    none.textContent = 'no expert cache: the engine holds every expert';
    box.replaceChildren(none);
    box.classList.add('none');
    box.dataset.layers = '0';
    lastLayers = null;
    return;
  }
  box.classList.remove('none');
  if (box.children.length !== ec.layers.length || box.querySelector('em')) {
    box.replaceChildren(...ec.layers.map(() => document.createElement('span')));
  }
  box.dataset.layers = String(ec.layers.length);
  ec.layers.forEach((l, i) => {
    let h = l.hits;
    let m = l.misses;
    const prev = lastLayers?.[i];
    if (prev && l.hits + l.misses > prev.hits + prev.misses) {
      h -= prev.hits;
      m -= prev.misses;
    }
    const cell = box.children[i];
    if (h + m === 0) {
      cell.style.backgroundColor = '';
      cell.title = `layer ${i}: no lookups yet`;
      return;
    }
    const rate = h / (h + m);
    // miss red (hue 0) → hit green (hue 130)
    cell.style.backgroundColor = `hsl(${Math.round(rate * 130)} 70% 45%)`;
    cell.title = `layer ${i}: ${(rate * 100).toFixed(0)} % hits (${h} hits, ${m} misses); since load ${l.hits}/${l.misses}`;
  });
  lastLayers = ec.layers;
}

function memory(mem) {
  const box = $('memory');
  box.replaceChildren();
  const total = mem.machine_ram_bytes;
  const rows = [
    ['Resident weights', mem.resident_bytes],
    ['Expert slots', mem.expert_slot_bytes],
    ['KV cache (full context)', mem.kv_bytes],
    ['Footprint', mem.footprint_bytes],
    ['Process RSS', mem.process_rss_bytes],
  ];
  const addRows = (rows, total) => {
    for (const [label, v] of rows) {
      const row = document.createElement('div');
      row.className = 'mem-row';
      const l = document.createElement('span');
      l.textContent = label;
      const val = document.createElement('span');
      val.className = 'mem-val';
      val.textContent = v == null ? '–' : total ? `${fmt.bytes(v)} (${((v / total) * 100).toFixed(1)} %)` : fmt.bytes(v);
      const bar = document.createElement('meter');
      bar.min = 0;
      bar.max = total || 1;
      bar.value = v || 0;
      row.append(l, val, bar);
      box.appendChild(row);
    }
  };
  addRows(rows, total);
  if (mem.vram_total_bytes != null) {
    // The GPU engine: its plan of the device's memory, against the device.
    const vram = [
      ['VRAM used (all processes)', mem.vram_used_bytes],
      ['VRAM trunk weights', mem.vram_trunk_bytes],
      ['VRAM KV and state', mem.vram_state_bytes],
      [mem.vram_streamed ? 'VRAM expert slots' : 'VRAM experts (all resident)', mem.vram_expert_slot_bytes],
    ];
    if (mem.vram_streamed) vram.push(['VRAM prefill staging', mem.vram_staging_bytes]);
    addRows(vram, mem.vram_total_bytes);
  }
  const foot = document.createElement('p');
  foot.className = 'mem-foot';
  foot.textContent = `of ${fmt.bytes(total)} RAM` + (mem.device && mem.device !== 'cpu' ? ` · device ${mem.device}` : '') +
    (mem.vram_total_bytes != null ? ` · VRAM ${fmt.bytes(mem.vram_used_bytes)} of ${fmt.bytes(mem.vram_total_bytes)}` : '');
  box.appendChild(foot);
}

// ---- start -----------------------------------------------------------------

applyTheme();
current();
renderConversations();
renderMessages();
loadModels().then(() => {
  document.body.dataset.ready = '1';
});
startLive();
$('input').focus();
