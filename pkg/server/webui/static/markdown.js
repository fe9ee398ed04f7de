// A small Markdown renderer that builds DOM nodes. Model text only ever
// reaches the page as text nodes (textContent / createTextNode): no HTML
// string is parsed, so markup a model writes (<script>, <img onerror>) is
// shown as the characters it is. Links are made only for http(s) and
// mailto URLs.
//
// Block syntax: fenced code (``` or ~~~, with a language), ATX headings,
// paragraphs, blockquotes, bullet and numbered lists (nested by indent),
// horizontal rules, pipe tables. Inline: `code`, **strong**, *em* / _em_,
// ~~strike~~, [text](url), <https://autolinks>, bare https:// URLs.

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const LIST_ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// safeURL returns url when it is http(s) or mailto, else null.
export function safeURL(url) {
  const u = url.trim();
  return /^(https?:\/\/|mailto:)/i.test(u) ? u : null;
}

// renderMarkdown returns a DocumentFragment for text. onCode(pre, code)
// is called for each code block (the copy button). A fence not closed yet
// (a reply still streaming) runs to the end of the text.
export function renderMarkdown(text, onCode) {
  const frag = document.createDocumentFragment();
  renderBlocks(text.replace(/\r\n?/g, '\n').split('\n'), frag, onCode, 0);
  return frag;
}

function renderBlocks(lines, parent, onCode, depth) {
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) {
      const p = el('p');
      inline(para.join('\n'), p);
      parent.appendChild(p);
      para = [];
    }
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const lang = m[2];
      const body = [];
      i++;
      while (i < lines.length && !(lines[i].trimStart().startsWith(fence) && lines[i].trim().replace(new RegExp('^' + fence[0] + '+'), '') === '')) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence (or the end of a reply still streaming)
      parent.appendChild(codeBlock(body.join('\n'), lang, onCode));
      continue;
    }
    if (line.trim() === '') {
      flush();
      i++;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      flush();
      const h = el('h' + Math.min(6, m[1].length + 2)); // h3…h6 inside a message
      h.classList.add('md-h' + m[1].length);
      inline(m[2], h);
      parent.appendChild(h);
      i++;
      continue;
    }
    if (RULE.test(line) && para.length === 0) {
      flush();
      parent.appendChild(el('hr'));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const inner = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        inner.push(m[1]);
        i++;
      }
      const bq = el('blockquote');
      if (depth < 8) renderBlocks(inner, bq, onCode, depth + 1);
      else bq.textContent = inner.join('\n');
      parent.appendChild(bq);
      continue;
    }
    if ((m = LIST_ITEM.exec(line)) && (para.length === 0 || m[1].length === 0)) {
      flush();
      i = list(lines, i, parent, onCode, depth);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      flush();
      i = table(lines, i, parent);
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
}

function list(lines, i, parent, onCode, depth) {
  const first = LIST_ITEM.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const ul = el(ordered ? 'ol' : 'ul');
  if (ordered) {
    const start = parseInt(first[2], 10);
    if (start !== 1) ul.start = start;
  }
  while (i < lines.length) {
    const m = LIST_ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[3]];
    i++;
    // The item's continuation: lines indented deeper than its marker, and
    // blank lines followed by such.
    while (i < lines.length) {
      const l = lines[i];
      const lead = l.length - l.trimStart().length;
      if (l.trim() === '') {
        const next = lines[i + 1];
        if (next !== undefined && next.trim() !== '' && next.length - next.trimStart().length > indent) {
          body.push('');
          i++;
          continue;
        }
        break;
      }
      if (lead > indent) {
        body.push(l.slice(Math.min(lead, indent + 2)));
        i++;
        continue;
      }
      break;
    }
    const li = el('li');
    if (depth < 8) renderBlocks(body, li, onCode, depth + 1);
    else li.textContent = body.join('\n');
    // A tight item's single paragraph is shown without its margins.
    if (li.childNodes.length === 1 && li.firstChild.tagName === 'P') {
      const p = li.firstChild;
      while (p.firstChild) li.insertBefore(p.firstChild, p);
      li.removeChild(p);
    }
    ul.appendChild(li);
    if (i < lines.length && lines[i].trim() === '') {
      const next = lines[i + 1];
      const nm = next === undefined ? null : LIST_ITEM.exec(next);
      if (nm && nm[1].length === indent) i++;
    }
  }
  parent.appendChild(ul);
  return i;
}

function cells(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function table(lines, i, parent) {
  const wrap = el('div', 'table-wrap');
  const t = el('table');
  const head = el('thead');
  const tr = el('tr');
  for (const c of cells(lines[i])) {
    const th = el('th');
    inline(c, th);
    tr.appendChild(th);
  }
  head.appendChild(tr);
  t.appendChild(head);
  const body = el('tbody');
  i += 2;
  while (i < lines.length && lines[i].includes('|') && lines[i].trim() !== '') {
    const row = el('tr');
    for (const c of cells(lines[i])) {
      const td = el('td');
      inline(c, td);
      row.appendChild(td);
    }
    body.appendChild(row);
    i++;
  }
  t.appendChild(body);
  wrap.appendChild(t);
  parent.appendChild(wrap);
  return i;
}

function codeBlock(text, lang, onCode) {
  const pre = el('pre', 'code-block');
  const code = el('code', null, text);
  if (lang) {
    pre.dataset.lang = lang;
    code.className = 'language-' + lang.replace(/[^\w+#.-]/g, '');
  }
  pre.appendChild(code);
  if (onCode) onCode(pre, code);
  return pre;
}

// inline appends the inline content of s to parent.
const INLINE = [
  { re: /`+/y, fn: codeSpan },
  { re: /\*\*(?=\S)([\s\S]*?\S)\*\*/y, fn: (m, p) => wrapped('strong', m[1], p) },
  // Underscores emphasise only at word edges (snake_case and __dunder__ stay text).
  { re: /(?<!\w)__(?=\S)([\s\S]*?\S)__(?!\w)/y, fn: (m, p) => wrapped('strong', m[1], p) },
  { re: /~~(?=\S)([\s\S]*?\S)~~/y, fn: (m, p) => wrapped('del', m[1], p) },
  { re: /\*(?=[^\s*])([\s\S]*?[^\s*])\*/y, fn: (m, p) => wrapped('em', m[1], p) },
  { re: /(?<![\w])_(?=\S)([\s\S]*?\S)_(?![\w])/y, fn: (m, p) => wrapped('em', m[1], p) },
  { re: /\[([^\]\n]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)/y, fn: link },
  { re: /<((?:https?:\/\/|mailto:)[^\s<>]+)>/y, fn: (m, p) => anchor(m[1], m[1], p) },
  { re: /https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"\]]/y, fn: (m, p) => anchor(m[0], m[0], p) },
  { re: /\\([\\`*_{}[\]()#+\-.!|~<>])/y, fn: (m, p) => p.appendChild(document.createTextNode(m[1])) },
  { re: /\n/y, fn: (m, p) => p.appendChild(el('br')) },
];

let inlineDepth = 0;

export function inline(s, parent) {
  let text = '';
  let i = 0;
  const flushText = () => {
    if (text) {
      parent.appendChild(document.createTextNode(text));
      text = '';
    }
  };
  outer: while (i < s.length) {
    const ch = s[i];
    if ('`*_~[<h\\\n'.includes(ch)) {
      for (const rule of INLINE) {
        rule.re.lastIndex = i;
        const m = rule.re.exec(s);
        if (!m) continue;
        if (rule.fn === codeSpan) {
          const ticks = m[0];
          const end = s.indexOf(ticks, i + ticks.length);
          if (end < 0) break; // no closing run: the backticks are text
          flushText();
          let body = s.slice(i + ticks.length, end).replace(/\n/g, ' ');
          if (/^ .* $/.test(body) && body.trim() !== '') body = body.slice(1, -1);
          parent.appendChild(el('code', null, body));
          i = end + ticks.length;
          continue outer;
        }
        flushText();
        rule.fn(m, parent);
        i += m[0].length;
        continue outer;
      }
    }
    text += ch;
    i++;
  }
  flushText();
}

function codeSpan() {}

function wrapped(tag, inner, parent) {
  const e = el(tag);
  if (inlineDepth < 16) {
    inlineDepth++;
    try {
      inline(inner, e);
    } finally {
      inlineDepth--;
    }
  } else {
    e.textContent = inner;
  }
  parent.appendChild(e);
}

function link(m, parent) {
  const url = safeURL(m[2]);
  if (!url) {
    parent.appendChild(document.createTextNode(m[0]));
    return;
  }
  anchor(m[1] || url, url, parent);
}

function anchor(label, url, parent) {
  const a = el('a', null, label);
  a.href = url;
  a.rel = 'noopener noreferrer nofollow';
  a.target = '_blank';
  parent.appendChild(a);
}
