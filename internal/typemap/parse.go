package typemap

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Parse parses a Delta / Databricks SQL type as written in DDL or in UC's
// type_text: "bigint", "DECIMAL(10,2)", "array<struct<a:int,b:string>>",
// "map<string,bigint>". Aliases (long, integer, byte, short, real, numeric,
// dec) are accepted case-insensitively.
func Parse(text string) (Type, error) {
	p := &typeParser{lex: lexer{src: text}}
	t, err := p.parseType()
	if err != nil {
		return Type{}, fmt.Errorf("parse type %q: %w", Elide(text, maxQuoted), err)
	}
	if tok := p.lex.peek(); tok.kind != tokEOF {
		return Type{}, fmt.Errorf("parse type %q: unexpected %q after type", Elide(text, maxQuoted), Elide(tok.text, maxQuoted))
	}
	return t, nil
}

// maxQuoted bounds the input an error message quotes.
const maxQuoted = 200

// Elide returns s, or, when it is longer than n bytes, its first and last
// n/2 bytes around a note of how much was left out: an error quoting its
// input stays readable (and small) whatever the input's size.
func Elide(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n/2], "") + fmt.Sprintf("…(%d bytes)…", len(s)-n/2*2) + strings.ToValidUTF8(s[len(s)-n/2:], "")
}

// MustParse is Parse for literals known to be valid; it panics otherwise.
func MustParse(text string) Type {
	t, err := Parse(text)
	if err != nil {
		panic(err)
	}
	return t
}

// ParseColumns parses a comma-separated column list as written in CREATE
// TABLE: "id BIGINT NOT NULL, name STRING COMMENT 'who', tags ARRAY<STRING>".
// Names may be backtick-quoted. Columns are nullable unless NOT NULL is given.
func ParseColumns(defs string) ([]Column, error) {
	p := &typeParser{lex: lexer{src: defs}}
	var cols []Column
	for {
		if p.lex.peek().kind == tokEOF && len(cols) == 0 {
			return nil, fmt.Errorf("parse columns %q: no columns", defs)
		}
		f, err := p.parseFieldDef(false)
		if err != nil {
			return nil, fmt.Errorf("parse columns %q: column %d: %w", Elide(defs, maxQuoted), len(cols)+1, err)
		}
		cols = append(cols, Column(f))
		tok := p.lex.next()
		switch {
		case tok.kind == tokEOF:
			return cols, nil
		case tok.is(","):
		default:
			return nil, fmt.Errorf("parse columns %q: expected ',' after column %q, got %q", Elide(defs, maxQuoted), f.Name, Elide(tok.text, maxQuoted))
		}
	}
}

// MaxTypeDepth bounds the nesting of a type (ARRAY, MAP and STRUCT levels)
// that Parse, ParseColumns and ParseColumnTypeJSON accept: the parsers
// recurse once per level, so an unbounded type string (one SQL statement
// or one UC answer) could overflow the stack and kill the process.
// Databricks does not document a nesting limit for complex types
// (assumption); 100 levels is far beyond any table Zerobus writes and the
// limit other engines document (Impala and Vertica: 100).
const MaxTypeDepth = 100

// depthError is the refusal of a type nested deeper than MaxTypeDepth.
func depthError() error {
	return fmt.Errorf("type nested more than %d levels deep (ARRAY, MAP and STRUCT levels): not supported", MaxTypeDepth)
}

type typeParser struct {
	lex   lexer
	depth int // ARRAY, MAP and STRUCT levels open
}

// parseFieldDef parses "name[:] TYPE [NOT NULL] [COMMENT 'x']". In a struct
// body the colon is customary; in a column list it is absent.
func (p *typeParser) parseFieldDef(inStruct bool) (Field, error) {
	tok := p.lex.next()
	if tok.kind != tokIdent && tok.kind != tokQuotedIdent {
		return Field{}, fmt.Errorf("expected a name, got %q", tok.text)
	}
	switch {
	case tok.text == "":
		return Field{}, fmt.Errorf("empty name")
	case !utf8.ValidString(tok.text):
		return Field{}, fmt.Errorf("name %q is not valid UTF-8", tok.text)
	}
	f := Field{Name: tok.text, Nullable: true}
	if p.lex.peek().is(":") {
		p.lex.next()
	}
	t, err := p.parseType()
	if err != nil {
		return Field{}, fmt.Errorf("%q: %w", f.Name, err)
	}
	f.Type = t
	for {
		tok := p.lex.peek()
		switch {
		case tok.isWord("NOT"):
			p.lex.next()
			if n := p.lex.next(); !n.isWord("NULL") {
				return Field{}, fmt.Errorf("%q: expected NULL after NOT, got %q", f.Name, n.text)
			}
			f.Nullable = false
		case tok.isWord("COMMENT"):
			p.lex.next()
			s := p.lex.next()
			if s.kind != tokString {
				return Field{}, fmt.Errorf("%q: expected a string after COMMENT, got %q", f.Name, s.text)
			}
			if !utf8.ValidString(s.text) {
				return Field{}, fmt.Errorf("%q: comment %q is not valid UTF-8", f.Name, s.text)
			}
			f.Comment = s.text
		default:
			return f, nil
		}
	}
}

func (p *typeParser) parseType() (Type, error) {
	if p.depth > MaxTypeDepth {
		return Type{}, depthError()
	}
	p.depth++
	defer func() { p.depth-- }()
	tok := p.lex.next()
	if tok.kind != tokIdent {
		return Type{}, fmt.Errorf("expected a type name, got %q", tok.text)
	}
	switch strings.ToUpper(tok.text) {
	case "BOOLEAN", "BOOL":
		return Primitive(Boolean), nil
	case "TINYINT", "BYTE":
		return Primitive(Byte), nil
	case "SMALLINT", "SHORT":
		return Primitive(Short), nil
	case "INT", "INTEGER":
		return Primitive(Int), nil
	case "BIGINT", "LONG":
		return Primitive(Long), nil
	case "FLOAT", "REAL":
		return Primitive(Float), nil
	case "DOUBLE":
		return Primitive(Double), nil
	case "STRING":
		return Primitive(String), nil
	case "VARCHAR", "CHAR":
		// Delta stores these as STRING; the length is a constraint we do not model.
		if p.lex.peek().is("(") {
			if _, err := p.parseInts(1); err != nil {
				return Type{}, err
			}
		}
		return Primitive(String), nil
	case "BINARY":
		return Primitive(Binary), nil
	case "DATE":
		return Primitive(Date), nil
	case "TIMESTAMP", "TIMESTAMP_LTZ":
		return Primitive(Timestamp), nil
	case "TIMESTAMP_NTZ":
		return Primitive(TimestampNTZ), nil
	case "VARIANT":
		return Primitive(Variant), nil
	case "DECIMAL", "DEC", "NUMERIC":
		if !p.lex.peek().is("(") {
			return DecimalOf(10, 0), nil
		}
		n, err := p.parseInts(2)
		if err != nil {
			return Type{}, err
		}
		prec, scale := n[0], 0
		if len(n) > 1 {
			scale = n[1]
		}
		if prec < 1 || prec > 38 || scale < 0 || scale > prec {
			return Type{}, fmt.Errorf("decimal(%d,%d): precision must be 1..38 and scale 0..precision", prec, scale)
		}
		return DecimalOf(prec, scale), nil
	case "ARRAY":
		if err := p.expect("<"); err != nil {
			return Type{}, err
		}
		elem, err := p.parseType()
		if err != nil {
			return Type{}, err
		}
		if err := p.expect(">"); err != nil {
			return Type{}, err
		}
		return ArrayOf(elem), nil
	case "MAP":
		if err := p.expect("<"); err != nil {
			return Type{}, err
		}
		key, err := p.parseType()
		if err != nil {
			return Type{}, err
		}
		if err := p.expect(","); err != nil {
			return Type{}, err
		}
		val, err := p.parseType()
		if err != nil {
			return Type{}, err
		}
		if err := p.expect(">"); err != nil {
			return Type{}, err
		}
		return MapOf(key, val), nil
	case "STRUCT":
		if err := p.expect("<"); err != nil {
			return Type{}, err
		}
		var fields []Field
		if p.lex.peek().is(">") {
			p.lex.next()
			return StructOf(), nil
		}
		for {
			f, err := p.parseFieldDef(true)
			if err != nil {
				return Type{}, err
			}
			fields = append(fields, f)
			tok := p.lex.next()
			if tok.is(">") {
				return StructOf(fields...), nil
			}
			if !tok.is(",") {
				return Type{}, fmt.Errorf("expected ',' or '>' in struct, got %q", tok.text)
			}
		}
	}
	return Type{}, fmt.Errorf("unknown type %q", tok.text)
}

// parseInts parses "(n[, m])" with at most max numbers.
func (p *typeParser) parseInts(max int) ([]int, error) {
	if err := p.expect("("); err != nil {
		return nil, err
	}
	var out []int
	for {
		tok := p.lex.next()
		if tok.kind != tokNumber {
			return nil, fmt.Errorf("expected a number, got %q", tok.text)
		}
		n, err := strconv.Atoi(tok.text)
		if err != nil {
			return nil, fmt.Errorf("bad number %q: %w", tok.text, err)
		}
		out = append(out, n)
		tok = p.lex.next()
		if tok.is(")") {
			if len(out) > max {
				return nil, fmt.Errorf("expected at most %d numbers", max)
			}
			return out, nil
		}
		if !tok.is(",") {
			return nil, fmt.Errorf("expected ',' or ')', got %q", tok.text)
		}
	}
}

func (p *typeParser) expect(punct string) error {
	if tok := p.lex.next(); !tok.is(punct) {
		return fmt.Errorf("expected %q, got %q", punct, tok.text)
	}
	return nil
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokIdent
	tokQuotedIdent
	tokString
	tokNumber
	tokPunct
)

type token struct {
	kind tokKind
	text string
}

func (t token) is(punct string) bool { return t.kind == tokPunct && t.text == punct }
func (t token) isWord(w string) bool { return t.kind == tokIdent && strings.EqualFold(t.text, w) }

// lexer tokenises type text and column lists: identifiers, `quoted`
// identifiers (doubled backticks escape), 'strings' (doubled quotes and
// backslash escapes), numbers and single-character punctuation.
type lexer struct {
	src    string
	pos    int
	peeked *token
}

func (l *lexer) peek() token {
	if l.peeked == nil {
		t := l.scan()
		l.peeked = &t
	}
	return *l.peeked
}

func (l *lexer) next() token {
	t := l.peek()
	l.peeked = nil
	return t
}

func (l *lexer) scan() token {
	for l.pos < len(l.src) && (l.src[l.pos] == ' ' || l.src[l.pos] == '\t' || l.src[l.pos] == '\n' || l.src[l.pos] == '\r') {
		l.pos++
	}
	if l.pos >= len(l.src) {
		return token{kind: tokEOF, text: "end of input"}
	}
	c := l.src[l.pos]
	switch {
	case c == '`':
		var b strings.Builder
		l.pos++
		for l.pos < len(l.src) {
			if l.src[l.pos] == '`' {
				if l.pos+1 < len(l.src) && l.src[l.pos+1] == '`' {
					b.WriteByte('`')
					l.pos += 2
					continue
				}
				l.pos++
				return token{kind: tokQuotedIdent, text: b.String()}
			}
			b.WriteByte(l.src[l.pos])
			l.pos++
		}
		return token{kind: tokPunct, text: "unterminated `identifier"}
	case c == '\'' || c == '"':
		quote := c
		var b strings.Builder
		l.pos++
		for l.pos < len(l.src) {
			ch := l.src[l.pos]
			switch {
			case ch == '\\' && l.pos+1 < len(l.src):
				b.WriteByte(l.src[l.pos+1])
				l.pos += 2
			case ch == quote && l.pos+1 < len(l.src) && l.src[l.pos+1] == quote:
				b.WriteByte(quote)
				l.pos += 2
			case ch == quote:
				l.pos++
				return token{kind: tokString, text: b.String()}
			default:
				b.WriteByte(ch)
				l.pos++
			}
		}
		return token{kind: tokPunct, text: "unterminated string"}
	case c >= '0' && c <= '9':
		start := l.pos
		for l.pos < len(l.src) && l.src[l.pos] >= '0' && l.src[l.pos] <= '9' {
			l.pos++
		}
		return token{kind: tokNumber, text: l.src[start:l.pos]}
	case c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'):
		start := l.pos
		for l.pos < len(l.src) {
			ch := l.src[l.pos]
			if ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') {
				l.pos++
				continue
			}
			break
		}
		return token{kind: tokIdent, text: l.src[start:l.pos]}
	}
	l.pos++
	return token{kind: tokPunct, text: string(c)}
}
