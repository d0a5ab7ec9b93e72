// The local room: the conversation, the pool's gauge and chart, what each persona is doing, why the room is quiet
// when it is, and the settings. Plain JavaScript, no build step. The snapshot draws the room once; the event stream
// keeps it current, and the room's state (GET .../state) is read again after the events that may change it.
"use strict";

(() => {
  const TIERS = ["aizuchi", "remark", "long"];
  const CHART_SECONDS = 120; // the chart shows at most this much of the past...
  const CHART_MIN_SECONDS = 20; // ...and at least this much, so a fresh page already shows the rhythm
  const SETTLE_MS = 4000; // "passed" and "spoke" show this long, then the persona is waiting again
  const STATE_EVERY_MS = 30000; // the state is read at least this often (tokens are spent with no event)
  const MAX_RETRY_MS = 8000;
  const HUMAN_COLOR = "#5f6368";
  const DEFAULT_NAME = "Guest";
  const NAME_KEY = "aizuchi.room.name";
  const NOTICE_KEY = "aizuchi.room.notice-hidden";
  const MEMORY_KEY = "aizuchi.room.memory";
  const OFFLINE = "The arbiter cannot be reached.";
  // What a persona the arbiter holds back shows instead of "waiting".
  const HELD_LABELS = { paused: "paused", muted: "muted", not_enabled: "off", idle_cap: "quiet", budget: "quiet" };

  const channelId = decodeURIComponent(location.pathname.split("/")[2] || "lobby");
  const apiUrl = (path) => `/room/api/${encodeURIComponent(channelId)}/${path}`;
  const $ = (id) => document.getElementById(id);

  const state = {
    loaded: false, // the snapshot has been drawn
    connection: "connecting", // connecting | live | lost
    settings: null,
    status: null, // the room's status as last read (bot_streak, ...)
    level: null,
    capacity: null,
    lastSeq: 0,
    personas: new Map(), // id -> {id, display_name, color}: those taking part
    colors: {}, // id -> colour, of every persona the arbiter knows (also former ones, for old messages)
    heldBack: {}, // persona id -> {reason, detail, retry_after}: why the arbiter would refuse it any turn now
    heldBackAt: 0, // when heldBack was read (its retry_after counts from then)
    memories: new Map(), // persona id -> its notes on this conversation ({seq, state, ...})
    usage: new Map(), // persona id -> its LLM tokens here today ({requests, prompt_tokens, cache_read_tokens, ...})
    messages: new Map(), // seq -> <li>
    activity: new Map(), // persona id -> {what, until}
    levels: [], // [{t: ms, level, capacity}], oldest first
    socket: null,
    retryMs: 500,
    retryAt: null, // when the next try to reconnect is due (ms), while the arbiter cannot be reached
    retryTimer: null,
    retry: null, // what to try again: loading the room, or connecting its stream
    reading: null, // the state read under way, if any
    readAgain: false, // an event came while it was under way: read once more
    readTimer: null,
    fieldErrors: new Map(), // settings input name -> {value: the text refused, text: why}
    settingsProblem: null, // a settings error that is no field's: {message, offline}
  };

  // --- small helpers --------------------------------------------------------------------------------

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    node.append(...children);
    return node;
  }

  async function request(method, path, body) {
    const options = { method, headers: {} };
    if (body instanceof FormData) {
      options.body = body; // multipart: the browser sets the type with its boundary
    } else if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(apiUrl(path), options);
    } catch (error) {
      const failure = new Error(OFFLINE);
      failure.offline = true;
      throw failure;
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const detail = data && data.error;
      const failure = new Error(detail ? detail.message : `The arbiter answered ${response.status}.`);
      failure.field = detail ? detail.field : null;
      failure.offline = !detail && response.status >= 500; // a proxy's answer, not the arbiter's
      throw failure;
    }
    return data;
  }

  // An error shown under a form; one about the connection goes away by itself once the arbiter is back.
  function showError(node, error) {
    node.textContent = error ? error.message : "";
    node.dataset.offline = String(Boolean(error && error.offline));
  }

  // "an aizuchi", "a remark": the article before a word (a tier's name, in a sentence).
  function article(word) {
    return /^[aeiou]/i.test(word) ? "an" : "a";
  }

  function clockTime(ms) {
    return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  function duration(ms) {
    const minutes = Math.max(1, Math.round(ms / 60000));
    const hours = Math.floor(minutes / 60);
    return hours ? `${hours} h ${minutes % 60} min` : `${minutes} min`;
  }

  // --- colours --------------------------------------------------------------------------------------

  // A persona's colour is the one in its file (the arbiter remembers it, also once the persona has left), else one
  // made from its id: the same in every room and every run, whoever else takes part.
  function colorOf(personaId) {
    const present = state.personas.get(personaId);
    return state.colors[personaId] || (present && present.color) || hashColor(personaId);
  }

  function hashColor(id) {
    let hash = 0x811c9dc5; // FNV-1a: ids that differ by one letter still land far apart
    for (const char of id) hash = Math.imul(hash ^ char.codePointAt(0), 0x01000193) >>> 0;
    return hslHex(hash % 360, 0.55, 0.42);
  }

  function hslHex(hue, saturation, lightness) {
    const a = saturation * Math.min(lightness, 1 - lightness);
    const channel = (n) => {
      const k = (n + hue / 30) % 12;
      const value = lightness - a * Math.max(-1, Math.min(k - 3, 9 - k, 1));
      return Math.round(value * 255).toString(16).padStart(2, "0");
    };
    return `#${channel(0)}${channel(8)}${channel(4)}`;
  }

  // Text on a coloured name chip: black or white, whichever reads better (WCAG relative luminance). One of the two
  // always reaches 4.5:1.
  function inkFor(hex) {
    const channels = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
    const [r, g, b] = channels.map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
    const luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b;
    return luminance > 0.179 ? "#111111" : "#ffffff";
  }

  function paint(node, color) {
    node.style.setProperty("background-color", color);
    node.style.setProperty("color", inkFor(color));
  }

  function chip(name, color) {
    const node = el("span", { class: "who", text: name });
    paint(node, color);
    return node;
  }

  // --- the conversation -----------------------------------------------------------------------------

  function messageNode(message) {
    const item = el("li", {
      class: `message kind-${message.author_kind}`,
      "data-seq": String(message.seq),
      "data-author": message.author_id,
      "data-author-kind": message.author_kind,
    });
    const color = message.author_kind === "persona" ? colorOf(message.author_id) : HUMAN_COLOR;
    const head = el("div", { class: "head" }, chip(message.author_name, color));
    if (message.tier) {
      item.dataset.tier = message.tier;
      item.dataset.cost = String(message.cost);
      const badge = { class: `badge tier-${message.tier}`, title: `cost ${message.cost}`, text: message.tier };
      head.append(el("span", badge));
    }
    const at = message.at * 1000;
    head.append(el("time", { datetime: new Date(at).toISOString(), text: clockTime(at) }));
    const lang = languageOf(message.text);
    const text = lang
      ? el("p", { class: "text", lang, text: message.text })
      : el("p", { class: "text" }, ...cjkRuns(message.text));
    item.append(head, text);
    const pictures = picturesNode(message);
    if (pictures) item.append(pictures);
    return item;
  }

  // The pictures a person showed with a message: those the room holds (local), by their path here. Another site's
  // picture (a Discord attachment) is not fetched: the page shows only what the arbiter serves.
  function picturesNode(message) {
    const held = (message.images || []).filter((image) => image.local);
    if (!held.length) return null;
    const node = el("div", { class: "pictures" });
    for (const image of held) {
      const src = new URL(image.url).pathname;
      const attrs = { src, alt: `a picture ${message.author_name} showed`, loading: "lazy", decoding: "async" };
      if (image.width && image.height) Object.assign(attrs, { width: image.width, height: image.height });
      const picture = el("img", attrs);
      picture.addEventListener("error", () =>
        link.replaceWith(el("span", { class: "picture-gone", text: "(a picture the room no longer holds)" })),
      );
      const link = el("a", { href: src, target: "_blank", rel: "noopener" }, picture);
      node.append(link);
    }
    return node;
  }

  // --- pictures to send: picked, pasted or dropped; shown until sent or taken back ---

  const pending = []; // { file, url }: url is a blob: address of the file, for its preview

  function addPictures(files) {
    const refused = [];
    for (const file of files) {
      if (!file.type.startsWith("image/")) {
        refused.push(file.name || "that file");
        continue;
      }
      pending.push({ file, url: URL.createObjectURL(file) });
    }
    showAttachments();
    if (refused.length) showError($("say-error"), { message: `Not a picture: ${refused.join(", ")}.` });
  }

  function takeBack(entry) {
    pending.splice(pending.indexOf(entry), 1);
    URL.revokeObjectURL(entry.url);
    showAttachments();
  }

  function clearPictures() {
    for (const entry of pending.splice(0)) URL.revokeObjectURL(entry.url);
    showAttachments();
  }

  function showAttachments() {
    const list = $("attachments");
    list.replaceChildren(
      ...pending.map((entry) => {
        const name = entry.file.name || "a pasted picture";
        const remove = el("button", { type: "button", class: "secondary", "aria-label": `Take back ${name}` }, "×");
        remove.addEventListener("click", () => takeBack(entry));
        return el("li", { class: "attachment" }, el("img", { src: entry.url, alt: name }), remove);
      }),
    );
    list.hidden = !pending.length;
  }

  function imageFiles(transfer) {
    return [...((transfer && transfer.files) || [])].filter((file) => file.type.startsWith("image/"));
  }

  // Chinese, Japanese and Korean characters (with their punctuation and full-width forms). A nod is set in italics,
  // which CJK type does not have (the browser only slants it), so CJK text stays upright. The arbiter's messages do
  // not say their language: the page looks at the characters.
  const CJK = /[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}\u3000-\u303f\uff00-\uffef]/u;
  const CJK_RUNS = new RegExp(`${CJK.source}+`, "gu");

  // A message mostly in CJK letters, Japanese (it has kana) or Korean (hangul), is marked as such (upright, and the
  // browser picks the right glyphs). Han alone does not tell Chinese from Japanese: no language then.
  function languageOf(text) {
    const letters = text.match(/\p{L}/gu) || [];
    const cjk = letters.filter((letter) => CJK.test(letter)).length;
    if (!cjk || cjk * 2 < letters.length) return null;
    if (/[\p{scx=Hiragana}\p{scx=Katakana}]/u.test(text)) return "ja";
    return /\p{scx=Hangul}/u.test(text) ? "ko" : null;
  }

  // Any other text as runs: each run of CJK characters in a <span class="cjk"> (upright), the rest as text.
  function cjkRuns(text) {
    const runs = [];
    let at = 0;
    for (const match of text.matchAll(CJK_RUNS)) {
      if (match.index > at) runs.push(text.slice(at, match.index));
      runs.push(el("span", { class: "cjk" }, match[0]));
      at = match.index + match[0].length;
    }
    if (at < text.length) runs.push(text.slice(at));
    return runs;
  }

  function showMessage(message) {
    const list = $("messages");
    const scroller = $("scroller");
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 48;
    const node = messageNode(message);
    const existing = state.messages.get(message.seq);
    if (existing) {
      existing.replaceWith(node);
    } else {
      // Events arrive in seq order, so this appends; a message that is somehow late still goes in its place.
      const next = [...list.children].find((other) => Number(other.dataset.seq) > message.seq) || null;
      list.insertBefore(node, next);
    }
    state.messages.set(message.seq, node);
    state.lastSeq = Math.max(state.lastSeq, message.seq);
    showEmpty();
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
  }

  function removeMessage(seq) {
    const node = state.messages.get(seq);
    if (node) node.remove();
    state.messages.delete(seq);
    showEmpty();
  }

  function showEmpty() {
    $("loading").hidden = state.loaded;
    $("empty").hidden = !state.loaded || state.messages.size > 0;
    $("scroller").setAttribute("aria-busy", String(!state.loaded));
  }

  // The history was cleared up to lastSeq. Only those go: seqs go on after it, and a stream that resumed (?after=)
  // may bring the clear after messages said since.
  function clearMessages(lastSeq) {
    for (const seq of [...state.messages.keys()]) if (seq <= lastSeq) removeMessage(seq);
  }

  function recolorMessages() {
    for (const node of state.messages.values()) {
      if (node.dataset.authorKind === "persona") paint(node.querySelector(".who"), colorOf(node.dataset.author));
    }
  }

  // --- the pool -------------------------------------------------------------------------------------

  function setLevel(level, capacity) {
    state.level = level;
    state.capacity = capacity;
    state.levels.push({ t: Date.now(), level, capacity });
    pruneLevels();
    showGauge();
    drawChart();
  }

  function showGauge() {
    const gauge = $("gauge");
    const strip = $("strip");
    if (state.level === null) return;
    const { level, capacity } = state;
    const share = capacity > 0 ? Math.max(0, Math.min(1, level / capacity)) : 0;
    gauge.dataset.state = "shown";
    gauge.removeAttribute("aria-busy");
    gauge.setAttribute("aria-valuemax", String(capacity));
    gauge.setAttribute("aria-valuenow", String(level));
    gauge.setAttribute("aria-valuetext", `${level} of ${capacity}`);
    const width = `${(share * 100).toFixed(1)}%`;
    $("gauge-fill").style.setProperty("width", width);
    $("strip-fill").style.setProperty("width", width);
    $("gauge-text").textContent = `${level} / ${capacity}`;
    $("strip-level").textContent = `${level}/${capacity}`;
    const costs = tierCosts();
    const band = level >= costs.remark ? "high" : level >= costs.aizuchi ? "low" : "empty";
    const quiet = quietReason();
    for (const node of [gauge, strip]) {
      node.dataset.band = band;
      if (quiet) node.dataset.quiet = quiet.kind;
      else delete node.dataset.quiet;
    }
    let note = "";
    if (state.connection === "lost") note = "last known: offline";
    else if (quiet) note = `nobody may speak: ${quiet.short}`;
    $("gauge-note").textContent = note;
    showTierCosts();
  }

  function tierCosts() {
    const tiers = state.settings ? state.settings.tiers : {};
    return Object.fromEntries(TIERS.map((tier) => [tier, tiers[tier] ? tiers[tier].cost : Infinity]));
  }

  function showTierCosts() {
    const costs = tierCosts();
    $("tier-costs").replaceChildren(
      ...TIERS.map((tier) => {
        const affordable = state.level !== null && state.level >= costs[tier];
        const now = affordable ? " (affordable now)" : " (more than the pool holds now)";
        return el(
          "li",
          {
            class: affordable ? "affordable" : "short",
            "data-tier": tier,
            title: `${article(tier)} ${tier} costs ${costs[tier]}`,
          },
          el("span", { class: `badge tier-${tier}`, text: tier }),
          `${Number.isFinite(costs[tier]) ? costs[tier] : "–"}`,
          el("span", { class: "visually-hidden", text: now }),
        );
      }),
    );
  }

  function pruneLevels() {
    const cutoff = Date.now() - CHART_SECONDS * 1000;
    // Keep the last point before the window: it is the level at the window's left edge.
    while (state.levels.length > 1 && state.levels[1].t < cutoff) state.levels.shift();
  }

  function drawChart() {
    const canvas = $("chart");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || canvas.width;
    const height = canvas.clientHeight || canvas.height;
    if (!canvas.clientWidth) return; // hidden (a phone showing the conversation): drawn when shown
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const colors = getComputedStyle(document.documentElement);
    const color = (name) => colors.getPropertyValue(name).trim();
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    g.fillStyle = color("--chart-bg");
    g.fillRect(0, 0, width, height);
    if (!state.levels.length) return;
    const now = Date.now();
    const seconds = Math.min(CHART_SECONDS, Math.max(CHART_MIN_SECONDS, (now - state.levels[0].t) / 1000));
    const start = now - seconds * 1000;
    const top = Math.max(...state.levels.map((p) => p.capacity), 1);
    const x = (t) => ((Math.max(t, start) - start) / (seconds * 1000)) * width;
    const y = (level) => height - 2 - (level / top) * (height - 4);
    g.strokeStyle = color("--chart-grid");
    g.setLineDash([3, 3]);
    g.beginPath();
    g.moveTo(0, y(top));
    g.lineTo(width, y(top));
    g.stroke();
    g.setLineDash([]);
    // A step line: the level holds until the next event changes it.
    g.beginPath();
    state.levels.forEach((point, index) => {
      if (index === 0) g.moveTo(x(point.t), y(point.level));
      else {
        g.lineTo(x(point.t), y(state.levels[index - 1].level));
        g.lineTo(x(point.t), y(point.level));
      }
    });
    g.lineTo(width, y(state.levels[state.levels.length - 1].level));
    g.lineWidth = 2;
    g.strokeStyle = color("--chart-line");
    g.stroke();
    const span = `the last ${Math.round(seconds)} s`;
    if ($("chart-span").textContent !== span) {
      $("chart-span").textContent = span;
      canvas.setAttribute("aria-label", `The pool's level over ${span}`);
    }
  }

  // --- the personas ---------------------------------------------------------------------------------

  // From the claim events: thinking while a claim is held, then spoke or passed for a moment. Nothing else sets
  // these (a replayed message is not someone speaking now).
  function setActivity(personaId, what) {
    const ttl = state.settings ? state.settings.claim_ttl_s : 30;
    const lasts = what === "thinking" ? ttl * 1000 : what === "waiting" ? 0 : SETTLE_MS;
    state.activity.set(personaId, { what, until: Date.now() + lasts });
    showPersonas();
  }

  // Why the arbiter would refuse this persona any turn now, if it would.
  function heldReason(personaId) {
    if (state.settings && state.settings.paused) return "paused"; // known at once, before the state is read again
    const held = state.heldBack[personaId];
    return held && held.reason !== "paused" ? held.reason : null;
  }

  function activityOf(personaId) {
    if (state.connection === "lost") return "unknown";
    const persona = state.personas.get(personaId);
    if (persona && persona.cannot_speak) return "stopped";
    const entry = state.activity.get(personaId);
    if (entry && entry.until > Date.now()) return entry.what;
    const held = heldReason(personaId);
    return held ? HELD_LABELS[held] || "quiet" : "waiting";
  }

  // A persona's tokens today: what went in (and how much of it the provider's prompt cache read and wrote), out.
  function usageText(used) {
    const n = (count) => count.toLocaleString("en");
    const cached = used.cache_read_tokens || used.cache_write_tokens
      ? ` (cache ${n(used.cache_read_tokens)} read, ${n(used.cache_write_tokens)} written)` : "";
    return `${n(used.prompt_tokens)} in${cached}, ${n(used.completion_tokens)} out today`;
  }

  function showPersonas() {
    if (!state.loaded) return;
    const personas = [...state.personas.values()];
    const list = $("personas");
    list.removeAttribute("aria-busy");
    const items = personas.map((persona) => {
      const what = activityOf(persona.id);
      const held = state.heldBack[persona.id];
      const attrs = { "data-persona": persona.id, "data-activity": what };
      if (held && held.detail) attrs.title = held.detail;
      // An external agent (an MCP client with a token of its own) takes part like a persona; the room says which.
      const agent = persona.kind === "agent" ? [el("span", { class: "hint", text: "agent" })] : [];
      const used = state.usage.get(persona.id);
      const tokens = used ? [el("span", { class: "hint usage", text: usageText(used) })] : [];
      return el(
        "li",
        attrs,
        el("span", { class: "member" }, chip(persona.display_name, colorOf(persona.id)), ...agent, ...tokens),
        el("span", { class: `activity activity-${what}`, text: what }),
      );
    });
    list.replaceChildren(...(items.length ? items : [el("li", { class: "placeholder", text: "No personas here." })]));
    $("strip-personas").replaceChildren(
      ...personas.map((persona) => {
        const what = activityOf(persona.id);
        return el(
          "li",
          { "data-persona": persona.id, "data-activity": what },
          chip(persona.display_name, colorOf(persona.id)),
          el("span", { class: `activity activity-${what}`, text: what }),
        );
      }),
    );
  }

  // --- what each persona remembers --------------------------------------------------------------------

  function notesNode(memory) {
    const notes = memory.state;
    const name = (state.personas.get(memory.persona) || { display_name: memory.persona }).display_name;
    // "Forget" on the button, and whose notes in its name: one button per persona, each told apart.
    const forget = el("button", {
      type: "button",
      class: "secondary forget",
      text: "Forget",
      "aria-label": `Forget ${name}'s notes`,
    });
    forget.addEventListener("click", () => forgetNotes(memory.persona, forget));
    const facts = el("ul", { class: "facts" }, el("li", { text: `Topic: ${notes.topic || "none yet"}` }));
    for (const question of notes.open_questions) facts.append(el("li", { text: `Open: ${question}` }));
    for (const agreed of notes.agreed) facts.append(el("li", { text: `Agreed: ${agreed}` }));
    for (const speaker of notes.speakers) facts.append(el("li", { text: `${speaker.name}: ${speaker.note}` }));
    return el(
      "li",
      { "data-persona": memory.persona },
      el(
        "div",
        { class: "head" },
        chip(name, colorOf(memory.persona)),
        el("span", { class: "hint", text: `up to message ${memory.seq}` }),
        forget,
      ),
      facts,
    );
  }

  function showMemories() {
    const memories = [...state.memories.values()].sort((a, b) => a.persona.localeCompare(b.persona));
    $("memories").replaceChildren(
      ...(memories.length ? memories.map(notesNode) : [el("li", { class: "placeholder", text: "No notes yet." })]),
    );
    $("forget-all").hidden = !memories.length;
    $("memory-count").textContent = memories.length ? `(${memories.length})` : "";
  }

  // Memory folds (the button in its heading), and stays as the person last left it.
  function foldMemory(open) {
    $("memory-toggle").setAttribute("aria-expanded", String(open));
    $("memory-body").hidden = !open;
  }

  async function forgetNotes(personaId, button) {
    button.disabled = true;
    try {
      await request("DELETE", personaId ? `memory/${encodeURIComponent(personaId)}` : "memory");
      showError($("memory-error"), null); // the memory events redraw the panel
    } catch (error) {
      showError($("memory-error"), error);
    } finally {
      button.disabled = false;
    }
  }

  // --- why the room is quiet ------------------------------------------------------------------------

  // The reason nobody may speak now, in words; null when someone may. Read from the settings and from what the
  // arbiter says of each persona (heldBack), not worked out here.
  function quietReason() {
    const settings = state.settings;
    if (!settings || !state.loaded) return null;
    if (!settings.enabled) {
      return { kind: "off", short: "switched off", text: "The personas are switched off in this room." };
    }
    if (settings.paused) {
      return {
        kind: "paused",
        short: "paused",
        text: "Paused: the personas stay quiet until you resume.",
        action: "Resume",
      };
    }
    const ids = [...state.personas.keys()];
    if (!ids.length) return null;
    const held = ids.map((id) => heldReason(id) && state.heldBack[id]);
    if (!held.every(Boolean)) return null;
    const budget = held.find((why) => why.reason === "budget");
    if (budget) {
      const text = "Today's token budget is spent: the personas are quiet until it resets";
      if (budget.retry_after == null) return { kind: "budget", short: "the budget is spent", text: `${text}.` };
      const at = state.heldBackAt + budget.retry_after * 1000;
      const when = `${clockTime(at)} (in ${duration(at - Date.now())})`;
      return { kind: "budget", short: "the budget is spent", text: `${text} at ${when}, or raise it in the settings.` };
    }
    if (held.some((why) => why.reason === "idle_cap")) {
      const turns = state.status ? state.status.bot_streak : state.settings.idle_cap;
      const taken = `${turns} ${turns === 1 ? "turn" : "turns"} without a person (the idle cap)`;
      const text = `The personas have taken ${taken}: say something to wake them.`;
      return { kind: "idle", short: "the idle cap", text };
    }
    return { kind: "muted", short: "all muted or off", text: "Every persona is muted or switched off in this room." };
  }

  function showQuiet() {
    const quiet = state.connection === "lost" ? null : quietReason();
    const banner = $("quiet");
    banner.hidden = !quiet;
    banner.dataset.kind = quiet ? quiet.kind : "";
    if (quiet) $("quiet-text").textContent = quiet.text;
    const action = $("quiet-action");
    action.hidden = !(quiet && quiet.action);
    if (quiet && quiet.action) action.textContent = quiet.action;
    showGauge();
  }

  // A persona that said it cannot speak at all (its model refused its key): who, and what to change, as it said.
  function showCannotSpeak() {
    const lines = [...state.personas.values()]
      .filter((persona) => persona.cannot_speak)
      .map((persona) => `${persona.display_name} cannot speak: ${persona.cannot_speak}.`);
    $("cannot-speak").hidden = !lines.length;
    $("cannot-speak-text").textContent = lines.join(" ");
  }

  function showNotice(notice) {
    const hidden = notice && sessionStorage.getItem(NOTICE_KEY) === notice;
    $("notice").hidden = !notice || hidden;
    $("notice-text").textContent = notice || "";
  }

  // --- the room's state: personas, who is held back, settings ---------------------------------------

  function applyState(room) {
    state.personas = new Map(room.personas.map((p) => [p.id, p]));
    state.colors = room.colors || {};
    state.heldBack = room.held_back || {};
    state.heldBackAt = Date.now();
    state.status = room.status;
    state.memories = new Map((room.memories || []).map((memory) => [memory.persona, memory]));
    state.usage = new Map((room.usage || []).map((used) => [used.persona, used]));
    applySettings(room.settings);
    showNotice(room.notice);
    showCannotSpeak();
    recolorMessages();
    showPersonas();
    showMemories();
    showQuiet();
  }

  // Read the state again soon; events in a burst make one read.
  function readStateSoon(delay = 150) {
    if (state.readTimer !== null) return;
    state.readTimer = window.setTimeout(() => {
      state.readTimer = null;
      readState();
    }, delay);
  }

  async function readState() {
    if (state.reading) {
      state.readAgain = true;
      return;
    }
    state.reading = request("GET", "state");
    try {
      applyState(await state.reading);
    } catch (error) {
      console.warn("could not read the room's state:", error.message);
    } finally {
      state.reading = null;
    }
    if (state.readAgain) {
      state.readAgain = false;
      readState();
    }
  }

  // --- settings -------------------------------------------------------------------------------------

  // A value the arbiter refused (or that is not a number) leaves its field marked: aria-invalid, and a line under
  // the buttons saying what is wrong, which is the field's description. It stays marked while the field holds that
  // value, whatever else happens (a pause, new settings from elsewhere), and it does not hold the others back:
  // Apply saves every change the arbiter takes.

  const settingInputs = () => [...$("settings").querySelectorAll("input[name]")];
  const inputNamed = (name) => settingInputs().find((input) => input.name === name);

  function settingValue(settings, name) {
    return name.split(".").reduce((value, key) => (value == null ? undefined : value[key]), settings);
  }

  function shownValue(value) {
    return value == null ? "" : String(value);
  }

  function applySettings(settings) {
    const previous = state.settings;
    state.settings = settings;
    for (const input of settingInputs()) {
      const value = shownValue(settingValue(settings, input.name));
      // A field the person is editing keeps what they typed; the others follow the channel.
      const edited = previous && input.value !== shownValue(settingValue(previous, input.name));
      if (!edited || input.value === value) input.value = value;
    }
    forgetFixed();
    showSettingsErrors();
    const pause = $("pause");
    pause.textContent = settings.paused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", String(settings.paused));
    document.body.classList.toggle("paused", settings.paused);
    showTierCosts();
    showPersonas();
    showQuiet(); // also the gauge: the tiers' costs may have changed
  }

  // A field no longer holding the value that was refused (put right, or back to the channel's) is not in error.
  function forgetFixed() {
    for (const [name, refused] of state.fieldErrors) {
      const input = inputNamed(name);
      const value = input ? input.value.trim() : null;
      const current = shownValue(settingValue(state.settings, name));
      if (value !== refused.value || (value === current && !input.validity.badInput)) state.fieldErrors.delete(name);
    }
  }

  const errorId = (name) => `settings-error-${name.replace(/[^A-Za-z0-9_-]/g, "-")}`;

  // The marks and the lines under the buttons, from state.fieldErrors and state.settingsProblem (an error that is
  // no field's: the arbiter cannot be reached, or it named nothing the page can point at). Redrawn only when they
  // change, so a screen reader hears the alert once.
  function showSettingsErrors() {
    const lines = [];
    for (const input of settingInputs()) {
      const refused = state.fieldErrors.get(input.name);
      if (refused) {
        const id = errorId(input.name);
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", id);
        lines.push(el("p", { id, "data-field": input.name, text: refused.text }));
      } else {
        input.removeAttribute("aria-invalid");
        input.removeAttribute("aria-describedby");
      }
    }
    const problem = state.settingsProblem;
    if (problem) lines.push(el("p", { class: "problem", text: problem.message }));
    const node = $("settings-error");
    const drawn = JSON.stringify(lines.map((line) => [line.id, line.textContent]));
    if (node.dataset.drawn !== drawn) {
      node.replaceChildren(...lines);
      node.dataset.drawn = drawn;
    }
    node.dataset.offline = String(Boolean(problem && problem.offline));
  }

  // The fields that differ from the channel's settings, parsed: [{input, value}]. One that is not a number goes
  // into `errors` instead.
  function changedFields(errors) {
    const changed = [];
    for (const input of settingInputs()) {
      const text = input.value.trim();
      const bad = input.validity.badInput; // "1e" or "-" in a number field: its value reads as ""
      if (!bad && text === shownValue(settingValue(state.settings, input.name))) continue;
      let value;
      if (!bad && text === "" && input.dataset.empty === "null") value = null;
      else value = bad || text === "" ? NaN : Number(text);
      if (Number.isNaN(value)) {
        errors.set(input.name, { value: text, text: `${capitalized(labelOf(input.name))}: enter a number.` });
      } else changed.push({ input, value });
    }
    return changed;
  }

  function patchOf(changed) {
    const changes = {};
    for (const { input, value } of changed) {
      const path = input.name.split(".");
      let target = changes;
      for (const key of path.slice(0, -1)) target = target[key] = target[key] || {};
      target[path[path.length - 1]] = value;
    }
    return changes;
  }

  function capitalized(text) {
    return text.charAt(0).toUpperCase() + text.slice(1);
  }

  function labelOf(name) {
    const input = settingInputs().find((candidate) => candidate.name === name);
    if (input) return input.dataset.label;
    return name.replace(/^tiers\./, "").replaceAll(".", " ").replaceAll("_", " ");
  }

  // The arbiter's error in the panel's words: the fields by their labels (not "tiers.aizuchi.recovery_s"), and the
  // input to mark: the one it names if the person changed it, else the one they changed that led to it (a cost
  // raised above the next tier's is the cost they raised, although the rule names the next tier).
  function explain(error, changed) {
    const field = error.field || "";
    let message = error.message;
    const prefix = `${field}: `;
    const fragment = Boolean(field) && message.startsWith(prefix); // "tiers.x.cost: Input should be ..."
    if (fragment) message = message.slice(prefix.length);
    message = message
      .replace(/^Input should be greater than or equal to (\S+)/, "must be at least $1")
      .replace(/^Input should be less than or equal to (\S+)/, "must be at most $1")
      .replace(/^Input should be a valid integer.*/, "must be a whole number")
      .replace(/^Input should be a valid number.*/, "must be a number")
      .replace(/^Input should be /, "must be ");
    const names = new Set(settingInputs().map((input) => input.name));
    if (field) names.add(field);
    for (const name of [...names].sort((a, b) => b.length - a.length)) {
      if (name.includes(".") || name.includes("_")) message = message.replaceAll(name, labelOf(name));
    }
    const named = changed.find((input) => input.name === field);
    const kind = field.split(".").pop();
    const sameKind = changed.filter((input) => input.name.split(".").pop() === kind);
    const marked = named ? [named] : sameKind.length ? sameKind : changed.length === 1 ? changed : [];
    const target = marked.length ? marked : settingInputs().filter((input) => input.name === field);
    const about = target.length ? target[0].name : field;
    let text = message;
    if (fragment) text = `${labelOf(field)} ${message}`;
    else if (about && about !== field) text = `${labelOf(about)}: ${message}`;
    if (!/[.!?]$/.test(text)) text += ".";
    return { text: capitalized(text), inputs: target };
  }

  // Apply: every changed field is sent. The arbiter answers a patch with its first error; the fields it points at
  // are marked and left out, and the rest is sent again, until it is taken or nothing is left. (A value refused
  // before is sent again too: another change may have made it fit, as a raised remark cost lets a nod cost more.)
  async function applyChanges() {
    const errors = new Map();
    let pending = changedFields(errors);
    state.settingsProblem = null;
    $("settings-note").textContent = "";
    if (!pending.length && !errors.size) {
      state.fieldErrors = errors;
      showSettingsErrors();
      $("settings-note").textContent = "Nothing changed.";
      return;
    }
    let saved = null;
    while (pending.length) {
      try {
        saved = await request("PATCH", "settings", patchOf(pending));
        break;
      } catch (error) {
        if (error.offline) {
          state.settingsProblem = error;
          break;
        }
        const { text, inputs } = explain(error, pending.map((change) => change.input));
        const left = pending.filter((change) => !inputs.includes(change.input));
        if (left.length === pending.length) {
          state.settingsProblem = { message: text, offline: false };
          break;
        }
        for (const input of inputs) errors.set(input.name, { value: input.value.trim(), text });
        pending = left;
      }
    }
    state.fieldErrors = errors;
    if (saved) {
      applySettings(saved);
      readStateSoon(0);
      $("settings-note").textContent = errors.size ? "Saved the other changes; the marked ones were not." : "Saved.";
    }
    showSettingsErrors();
    if (errors.size && !saved) inputNamed(errors.keys().next().value).focus();
    if (errors.size || state.settingsProblem) {
      $("settings-error").scrollIntoView({ block: "nearest" }); // below the buttons, which may be at the fold
    }
  }

  // Pause or resume: the fields in error stay so.
  async function saveSettings(changes, done) {
    state.settingsProblem = null;
    $("settings-note").textContent = "";
    showSettingsErrors();
    try {
      applySettings(await request("PATCH", "settings", changes));
      $("settings-note").textContent = done;
      readStateSoon(0);
    } catch (error) {
      state.settingsProblem = error;
      showSettingsErrors();
    }
  }

  // --- the event stream and the connection -----------------------------------------------------------

  function onEvent(event) {
    switch (event.type) {
      case "message":
        showMessage(event.message);
        readStateSoon(); // the bots' turns since a person spoke, a persona new to the page
        break;
      case "edited":
        if (state.messages.has(event.message.seq)) showMessage(event.message);
        break;
      case "retracted":
      case "deleted":
        removeMessage(event.seq);
        break;
      case "cleared":
        clearMessages(event.last_seq);
        state.lastSeq = Math.max(state.lastSeq, event.last_seq);
        break;
      case "level":
        setLevel(event.level, event.capacity);
        break;
      case "settings":
        applySettings(event.settings);
        readStateSoon(0);
        break;
      case "memory":
        if (event.memory) state.memories.set(event.persona, event.memory);
        else state.memories.delete(event.persona);
        showMemories();
        break;
      case "claim": {
        const claim = event.claim;
        const what = { held: "thinking", spoken: "spoke", released: "passed", retracted: "waiting", cleared: "waiting" }[claim.state];
        if (what) setActivity(claim.persona, what);
        break;
      }
      default:
        break; // a kind of event this page does not know yet
    }
  }

  function setConnection(what) {
    state.connection = what;
    document.body.dataset.connection = what;
    const node = $("connection");
    node.dataset.state = what === "lost" ? "offline" : what;
    node.textContent = { connecting: "connecting…", live: "live", lost: "offline" }[what];
  }

  // The arbiter cannot be reached: say so, show what the page knows as no longer live, and try again, counting down.
  function lost(retry) {
    setConnection("lost");
    const wait = state.retryMs;
    state.retryMs = Math.min(state.retryMs * 2, MAX_RETRY_MS);
    state.retryAt = Date.now() + wait;
    window.clearTimeout(state.retryTimer);
    state.retryTimer = window.setTimeout(() => {
      state.retryAt = null;
      showOutage();
      retry();
    }, wait);
    state.retry = retry;
    showOutage();
    showPersonas();
    showQuiet();
  }

  function showOutage() {
    const banner = $("outage");
    banner.hidden = state.connection !== "lost";
    if (banner.hidden) return;
    const what = state.loaded
      ? "The arbiter cannot be reached: the room is not live."
      : "The room cannot be loaded: the arbiter cannot be reached.";
    const seconds = state.retryAt === null ? 0 : Math.ceil((state.retryAt - Date.now()) / 1000);
    $("outage-text").textContent = seconds > 0 ? `${what} Trying again in ${seconds} s…` : `${what} Trying again…`;
  }

  function reconnectNow() {
    if (state.connection !== "lost" || state.retryAt === null) return;
    window.clearTimeout(state.retryTimer);
    state.retryAt = null;
    showOutage();
    state.retry();
  }

  // Back: the banner goes, and so do the errors that were only about the connection.
  function recovered() {
    state.retryMs = 500;
    state.retryAt = null;
    setConnection("live");
    showOutage();
    if ($("say-error").dataset.offline === "true") showError($("say-error"), null);
    if (state.settingsProblem && state.settingsProblem.offline) {
      state.settingsProblem = null;
      showSettingsErrors();
    }
    showPersonas();
    showQuiet();
  }

  // The stream replays the messages after the seq it is given as they are now, then sends the level. Asking
  // from before the recent messages shown, rather than after the last one, also brings what happened to them
  // while the page was away: edited ones come back edited, and those that do not come back were deleted or
  // retracted. Older messages are left as shown, so a long-open page does not replay everything it holds.
  const RESYNC = 200;

  function connect() {
    const recent = [...state.messages.keys()].filter((seq) => seq > state.lastSeq - RESYNC);
    const after = recent.length ? Math.min(...recent) - 1 : state.lastSeq;
    let replayed = new Set(); // seqs the replay brought; null once it is over
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${apiUrl("events")}?after=${after}`);
    state.socket = socket;
    socket.addEventListener("message", (frame) => {
      try {
        const event = JSON.parse(frame.data);
        if (replayed && event.type === "message") replayed.add(event.message.seq);
        if (replayed && event.type === "level") {
          for (const seq of recent) if (!replayed.has(seq)) removeMessage(seq);
          replayed = null;
          // Live from here on; what changed while the page was away (settings, who is held back) is read again.
          if (state.connection !== "live") recovered();
          readStateSoon(0);
        }
        onEvent(event);
      } catch (error) {
        console.warn("could not show an event:", error);
      }
    });
    socket.addEventListener("close", () => {
      if (state.socket !== socket) return;
      state.socket = null;
      lost(connect);
    });
  }

  async function load() {
    let snapshot;
    try {
      snapshot = await request("GET", "snapshot");
    } catch (error) {
      if (!error.offline) {
        $("outage-text").textContent = `The room cannot be loaded: ${error.message}`;
        $("outage").hidden = false;
        return;
      }
      lost(load);
      return;
    }
    state.loaded = true;
    for (const message of snapshot.history) showMessage(message);
    state.lastSeq = snapshot.last_seq;
    applyState(snapshot);
    setLevel(snapshot.status.level, snapshot.status.capacity);
    showEmpty();
    $("scroller").scrollTop = $("scroller").scrollHeight;
    connect();
  }

  // --- on a phone: the conversation, or the pool and settings in its place ---------------------------

  function setView(view) {
    document.body.dataset.view = view;
    const toggle = $("view-toggle");
    toggle.setAttribute("aria-expanded", String(view === "side"));
    toggle.textContent = view === "side" ? "Conversation" : "Pool & settings";
    if (view === "side") drawChart();
  }

  // --- start ----------------------------------------------------------------------------------------

  function start() {
    $("room-name").textContent = channelId;
    document.title = `${channelId} · aizuchi room`;
    $("switch-room").value = channelId;
    const name = $("name");
    name.value = localStorage.getItem(NAME_KEY) || DEFAULT_NAME;
    name.addEventListener("input", () => localStorage.setItem(NAME_KEY, name.value.trim()));

    $("switch").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = $("switch-room");
      if (input.reportValidity()) location.assign(`/room/${encodeURIComponent(input.value.trim())}`);
    });
    $("view-toggle").addEventListener("click", () => setView(document.body.dataset.view === "side" ? "chat" : "side"));
    $("reconnect").addEventListener("click", reconnectNow);
    $("forget-all").addEventListener("click", (event) => forgetNotes(null, event.currentTarget));
    foldMemory(localStorage.getItem(MEMORY_KEY) !== "folded");
    $("memory-toggle").addEventListener("click", () => {
      const open = $("memory-toggle").getAttribute("aria-expanded") !== "true";
      foldMemory(open);
      localStorage.setItem(MEMORY_KEY, open ? "open" : "folded");
    });
    $("notice-hide").addEventListener("click", () => {
      sessionStorage.setItem(NOTICE_KEY, $("notice-text").textContent);
      $("notice").hidden = true;
    });
    $("notice-text").addEventListener("click", () => $("notice").toggleAttribute("data-expanded"));
    $("quiet-action").addEventListener("click", () => saveSettings({ paused: false }, "Resumed."));

    const text = $("text");
    text.addEventListener("keydown", (event) => {
      // Enter sends; Shift+Enter is a new line; Enter that confirms an input method's conversion is neither.
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
        event.preventDefault();
        $("composer").requestSubmit();
      }
    });
    // A picture pasted into the message box joins the message (the text pasted with it, if any, still goes in).
    text.addEventListener("paste", (event) => {
      const files = imageFiles(event.clipboardData);
      if (!files.length) return;
      if (!event.clipboardData.types.includes("text/plain")) event.preventDefault();
      addPictures(files);
    });
    $("attach").addEventListener("click", () => $("picture").click());
    $("picture").addEventListener("change", (event) => {
      addPictures([...event.target.files]);
      event.target.value = ""; // the same file may be picked again
    });
    const composer = $("composer");
    composer.addEventListener("dragover", (event) => {
      if (![...event.dataTransfer.types].includes("Files")) return;
      event.preventDefault();
      composer.dataset.dropping = "";
    });
    composer.addEventListener("dragleave", () => delete composer.dataset.dropping);
    composer.addEventListener("drop", (event) => {
      delete composer.dataset.dropping;
      if (!event.dataTransfer.files.length) return;
      event.preventDefault();
      addPictures([...event.dataTransfer.files]);
    });

    $("composer").addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = $("say-error");
      const body = { name: name.value.trim(), text: text.value.trim() };
      if (!body.name) {
        showError(error, { message: "Enter your name first." });
        name.focus();
        return;
      }
      if (!body.text && !pending.length) {
        text.focus();
        return;
      }
      const send = $("send");
      send.disabled = true;
      try {
        if (pending.length) {
          // With pictures, a form: the arbiter checks each from its bytes and says which one it cannot take.
          const form = new FormData();
          form.append("name", body.name);
          form.append("text", body.text);
          for (const entry of pending) form.append("image", entry.file, entry.file.name || "pasted-picture");
          await request("POST", "say", form);
          clearPictures();
        } else {
          await request("POST", "say", body);
        }
        showError(error, null);
        text.value = "";
      } catch (failure) {
        showError(error, failure);
      } finally {
        send.disabled = false;
        text.focus();
      }
    });

    $("settings").addEventListener("input", () => {
      // A field put right is no longer marked; an error that was no field's goes with any change.
      forgetFixed();
      if (state.settingsProblem && !state.settingsProblem.offline) state.settingsProblem = null;
      showSettingsErrors();
      $("settings-note").textContent = "";
    });
    $("settings").addEventListener("submit", (event) => {
      event.preventDefault();
      applyChanges();
    });
    $("pause").addEventListener("click", () => {
      const paused = !(state.settings && state.settings.paused);
      saveSettings({ paused }, paused ? "Paused." : "Resumed.");
    });

    window.setInterval(() => {
      pruneLevels();
      drawChart();
      showPersonas();
      showQuiet(); // the budget's countdown
    }, 1000);
    window.setInterval(() => {
      if (state.connection === "lost") showOutage();
    }, 250);
    window.setInterval(() => {
      if (state.connection === "live") readState();
    }, STATE_EVERY_MS);
    window.addEventListener("resize", drawChart);
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", drawChart);

    showEmpty();
    load();
  }

  start();
})();
